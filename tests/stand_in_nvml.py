"""A stand-in for pynvml (the tfdist[gpu] extra) in unit tests of GPU discovery: no driver needed."""


class StandInNvml:
    """pynvml's calls discovery makes, over a list of (uuid, name): NVML numbers devices as nvidia-smi."""

    def __init__(self, devices, fails_to_start=False):
        self.devices, self.fails_to_start, self.shut_down = devices, fails_to_start, False

    def nvmlInit(self):
        if self.fails_to_start:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return self.devices[handle][0].encode()  # older pynvml: bytes

    def nvmlDeviceGetName(self, handle):
        return self.devices[handle][1]
