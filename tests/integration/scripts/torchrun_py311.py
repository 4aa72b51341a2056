#!/usr/bin/python3
# Debian 12's torchrun (python3-torch 1.13) fails under Python 3.11 when parsing --redirects /
# --tee values: enum.Flag iteration in 3.11 skips the zero and alias members, so
# Std.from_str("0") / ("3") finds nothing. The tests need the real torchrun as their reference,
# so this wrapper replaces that one function with an int-based parse and runs torchrun
# unchanged otherwise. (../shared/tools/torchrun113 is the team's copy of the same fix; this one
# lets the tests run from any checkout.)
import os
import re
import sys

import torch.distributed.elastic.multiprocessing.api as api


def _parse_std(cls, value):
    if re.match(api._VALUE_REGEX, value):
        return api.Std(int(value))
    if re.match(api._MAPPING_REGEX, value):
        return {int(rank): api.Std(int(mask))
                for rank, mask in (item.split(":") for item in value.split(","))}
    raise ValueError(value)


api.Std.from_str = classmethod(_parse_std)

# TORCHRUN_EVENTS_TO_STDERR=1: torch 1.13 records its end-of-run events to the "null" handler
# and has no --event_log_handler; pointing that handler at stderr gives what torch 2.x's
# --event-log-handler=console prints, the reference for ddprun's.
if os.environ.get("TORCHRUN_EVENTS_TO_STDERR") == "1":
    import logging

    import torch.distributed.elastic.events.handlers as handlers

    handlers._log_handlers["null"] = logging.StreamHandler()

from torch.distributed.run import main  # noqa: E402

sys.exit(main())
