"""python -m ddprun_train ...: the same as the `ddp-train` command."""

from ddprun_train.launcher import main

main()
