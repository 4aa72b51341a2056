// Integration tests for ddp-train: being written.
