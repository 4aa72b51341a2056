# A worker with a tqdm progress bar (test helper): it stops half way until the file named by its
# argument exists, so a test can check that the bar's updates reach ddprun's console while the
# line is still unfinished.
import os
import sys
import time

from tqdm import tqdm

gate = sys.argv[1]
for i in tqdm(range(4), mininterval=0, miniters=1, ncols=60, ascii=True):
    if i == 2:
        while not os.path.exists(gate):
            time.sleep(0.02)
print("finished", flush=True)
