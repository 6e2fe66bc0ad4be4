"""Prints the devices tfdist gave this process, then waits to be stopped, or with --then-exit exits
(no TensorFlow)."""
import os
import sys
import time

print(f"cuda_visible_devices={os.environ.get('CUDA_VISIBLE_DEVICES')} tfdist_gpus={os.environ.get('TFDIST_GPUS')} "
      f"order={os.environ.get('CUDA_DEVICE_ORDER')} slots={os.environ.get('TFDIST_SLOTS')}", flush=True)
if "--then-exit" not in sys.argv:
    time.sleep(600)
