# A worker that fails the way most torch scripts do, decorated with torch's @record so that it
# writes TORCHELASTIC_ERROR_FILE (test helper).
from torch.distributed.elastic.multiprocessing.errors import record

def check(lr):
    if lr <= 0:
        raise ValueError("learning rate must be positive, got %s" % lr)

@record
def main():
    check(-1.0)

if __name__ == "__main__":
    main()
