"""Regenerates the Python code of the wire contract (committed beside the .proto).

    python -m cluster.shared.protos.generate          # write
    python -m cluster.shared.protos.generate --check  # exit 1 if the committed code is stale

Needs grpcio-tools (the `test` extra). tests/unit/test_protos.py runs --check.
"""

from __future__ import annotations

import filecmp
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def generate(out_dir: str) -> None:
    from grpc_tools import protoc

    protos = sorted(glob.glob(os.path.join(HERE, "tfdist", "v1", "*.proto")))
    args = ["protoc", f"-I{HERE}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # protoc writes `from tfdist.v1 import ...`: make it a package-relative import.
    for path in glob.glob(os.path.join(out_dir, "tfdist", "v1", "*_pb2_grpc.py")):
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("from tfdist.v1 import", "from . import"))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        generated = sorted(os.path.relpath(p, tmp) for p in glob.glob(os.path.join(tmp, "tfdist", "v1", "*_pb2*")))
        if "--check" in sys.argv:
            stale = [g for g in generated if not os.path.exists(os.path.join(HERE, g))
                     or not filecmp.cmp(os.path.join(tmp, g), os.path.join(HERE, g), shallow=False)]
            if stale:
                print(f"stale generated code: {', '.join(stale)}; run python -m cluster.shared.protos.generate")
                return 1
            return 0
        for g in generated:
            shutil.copy(os.path.join(tmp, g), os.path.join(HERE, g))
            print(f"wrote cluster/shared/protos/{g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
