#!/usr/bin/env bash
# Decoded images/s of ddp-train's ImageNet input pipeline (markdown table on stdout).
set -euo pipefail
BUILD_DIR=${1:-build}
echo "## ddp-train imagenet input pipeline (read + decode + RandomResizedCrop + flip + normalise)"
"$BUILD_DIR/bin/imagenet-decode-bench" --images 1024
echo
"$BUILD_DIR/bin/imagenet-decode-bench" --images 1024 --val
