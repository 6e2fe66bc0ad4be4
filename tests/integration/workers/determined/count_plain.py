"""Stage 0: a script that knows nothing of any cluster (it counts)."""

import time

x = 0
for batch in range(20):
    x += 1
    time.sleep(0.01)
    print(f"x is now {x}")
