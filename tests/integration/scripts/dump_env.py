# Writes this worker's whole environment as JSON to OUT_DIR/rank<RANK>.json (test helper).
import json, os, sys
out_dir = sys.argv[1]
with open(os.path.join(out_dir, "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
