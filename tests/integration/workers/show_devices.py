"""Prints the devices tfdist gave this process, then waits to be stopped (no TensorFlow)."""
import os
import time

print(f"cuda_visible_devices={os.environ.get('CUDA_VISIBLE_DEVICES')} tfdist_gpus={os.environ.get('TFDIST_GPUS')} "
      f"order={os.environ.get('CUDA_DEVICE_ORDER')}", flush=True)
time.sleep(600)
