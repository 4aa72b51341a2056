# A worker that draws a tqdm progress bar on stderr (test helper, live_progress_test): its bar
# is labelled @@RANK so that a test can tell the ranks apart, and it stops half way until the file
# named by its argument exists, so that the test can look at the console while every bar's line
# is still unfinished.
import os
import sys
import time

from tqdm import tqdm

gate = sys.argv[1]
rank = os.environ["RANK"]
for i in tqdm(range(4), desc=f"@@{rank}", mininterval=0, miniters=1, ncols=60, ascii=True):
    if i == 2:
        while not os.path.exists(gate):
            time.sleep(0.02)
print(f"@@{rank} finished", flush=True)
