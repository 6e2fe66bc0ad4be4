# Two commands from a fresh clone: `make demo` and `make test`.
# The venv's interpreter: the distribution's python3 where it is 3.10 or newer and can make a venv with its
# headers (Horovod's build needs Python.h), else the first python3 on PATH. Debian's is built with PGO and LTO
# and a static libpython; a pyenv build (--enable-shared, no PGO, the default) took 15-18% more CPU for the
# same work here: `import tensorflow` 3.0-3.2 s against 2.5 s, a two-job MWMS test module 56-62 s against
# 48-50 s. `make PYTHON=...` chooses another.
SYSTEM_PYTHON_OK := import sys, os, sysconfig, venv, ensurepip; \
	sys.exit(sys.version_info < (3, 10) or not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
PYTHON ?= $(shell /usr/bin/python3 -c '$(SYSTEM_PYTHON_OK)' 2>/dev/null && echo /usr/bin/python3 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
# pip as a few step lines (resolving, installing N packages, "still ..." every 10 s; all of pip's output
# if it fails): tools/pip_steps.py.
PIP_STEPS := $(PY) tools/pip_steps.py

.PHONY: demo test unit integration multihost bazel-test venv clean chaos bench-failure bench-modes bench-scale bench-kubernetes bench-diagnose horovod slurm debian-packages fuzz kubernetes kubernetes-start torch torch-start plot FORCE

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# One stamp per set of extras: re-installs when pyproject.toml changes.
# tf_keras runs parameter-server jobs (Keras 3 has none); its metadata asks for the full `tensorflow`
# wheel beside tensorflow-cpu, so it is installed without dependencies (it needs nothing TF lacks).
TF_KERAS := tf_keras==2.21.0

# The demo's install skips pip's bytecode compilation (half of its time: every file of TensorFlow, most
# never imported); what the demo imports compiles on first use. The test venv compiles everything, what
# a demo installed first included: the suite starts hundreds of Pythons, and Bazel's sandbox may keep
# them from writing bytecode into .venv.
$(VENV)/.examples: pyproject.toml | $(VENV)/bin/python
	@$(PIP_STEPS) 'tfdist[examples]' -- --no-compile -e '.[examples]'
	@$(PIP_STEPS) tf_keras -- --no-compile --no-deps $(TF_KERAS)
	@touch $@

#
# The test venv installs with uv (from PyPI, into the venv first): about 7 s for the ~100 packages where pip
# took 110 s (resolving, then installing one package at a time) on a fresh clone, all of it before any test
# can start; its bytecode is then compiled on both cores.
UV := $(VENV)/bin/uv
$(UV): | $(VENV)/bin/python
	@$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'uv>=0.9'

#
# scikit-learn and matplotlib stay out of the test venv: Keras imports both whenever they are installed (its
# scikit-learn wrappers, its image-gallery plot), 2.3 s of CPU more at each TensorFlow process's start (6.3 s
# against 4.0 s here), in each of the suite's hundreds. A venv from before loses them (not their dependencies,
# which Keras does not import).
$(VENV)/.test: pyproject.toml | $(UV)
	@echo "tfdist[test,examples]: uv pip install -e .[test,examples]"
	@$(UV) pip install --quiet --python $(PY) -e '.[test,examples]'
	@$(UV) pip uninstall --quiet --python $(PY) scikit-learn matplotlib 2>/dev/null || true
	@$(UV) pip install --quiet --python $(PY) --no-deps $(TF_KERAS)
	@$(PY) -m compileall -q -j0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null || true
	@echo "tfdist[test,examples]: installed"
	@touch $@

# JAX for the jax mode's tests, beside the venv rather than in it: `import tensorflow` loads JAX wherever it is
# installed (tensorflow.lite's util), 0.64 s of CPU more for each of the suite's hundreds of TensorFlow
# processes. The jax mode's tests put .venv/jax-site on their workers' PYTHONPATH (tests/conftest.py).
# Its dependencies are the venv's (numpy, ml_dtypes, opt_einsum: TensorFlow's), but scipy, installed beside it.
JAX := jax==0.10.2 jaxlib==0.10.2 scipy==1.17.1
# The stamps hold the pins: a venv made with other pins installs again. Compiled here, as the venv is (the
# workers that import them could not write bytecode there).
$(VENV)/.jax: FORCE | $(VENV)/.test
	@[ "$$(cat $@ 2>/dev/null)" = "$(JAX)" ] || { rm -rf $(VENV)/jax-site && \
	  $(UV) pip install --quiet --python $(PY) --no-deps --target $(VENV)/jax-site $(JAX) && \
	  { $(PY) -m compileall -q -j0 $(VENV)/jax-site >/dev/null || true; } && echo "$(JAX)" > $@; }

# matplotlib for the tests of `tfdist metrics --plot`, beside the venv for the same reason as JAX (Keras imports
# it wherever it is installed); those tests put .venv/plot-site on the path (tests/conftest.py: PLOT_SITE). Its
# other dependencies are the venv's: numpy, packaging, and pillow (tensorboard's).
PLOT := matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 pyparsing==3.3.3 \
	python-dateutil==4.0.0 tzdata==2026.6
$(VENV)/.plot: FORCE | $(VENV)/.test
	@[ "$$(cat $@ 2>/dev/null)" = "$(PLOT)" ] || { rm -rf $(VENV)/plot-site && \
	  $(UV) pip install --quiet --python $(PY) --no-deps --target $(VENV)/plot-site $(PLOT) && \
	  { $(PY) -m compileall -q -j0 $(VENV)/plot-site >/dev/null || true; } && echo "$(PLOT)" > $@; }

plot: $(VENV)/.plot

FORCE:

venv: $(VENV)/.test $(VENV)/.jax $(VENV)/.plot

# Horovod 0.28.1 built from its sdist for the venv's TensorFlow (Gloo only): about 2 minutes, once;
# kept in .venv. `tfdist build-horovod` runs the script the package ships (cluster/client/build_horovod.sh
# says why it changes two of Horovod's sources), so an installed tfdist builds it the same way.
$(VENV)/.horovod: cluster/client/build_horovod.sh | $(VENV)/.test
	$(VENV)/bin/tfdist build-horovod --python $(PY)
	touch $@

horovod: $(VENV)/.horovod

# PyTorch for the torch mode's tests, in a cache outside the clone (tools/torch_cache.sh: PyPI's Linux torch
# is a CUDA build of about 5 GB installed, 7 minutes the first time; nothing once there). `make test` starts
# its install first, in the background, and waits for it after the venv's.
$(VENV)/.torch: tools/torch_cache.sh | $(VENV)/.test
	@PYTHON=$(PY) bash tools/torch_cache.sh --wait
	@PYTHON=$(PY) bash tools/torch_cache.sh --pth $(VENV)
	@touch $@

torch-start: | $(VENV)/bin/python
	@PYTHON=$(PY) bash tools/torch_cache.sh --start

torch: $(VENV)/.torch

# Debian's packages the suite runs for real: Slurm's daemons and clients (tests/slurm: a real slurmctld
# and one slurmd per namespace node; the tests start their own private munged and daemons), Prometheus
# (tests/integration/test_prometheus.py scrapes a coordinator and agents) and headless Chromium with its
# driver (tests/integration/test_dashboard.py). One apt run when any is missing.
# The real Kubernetes node's (tests/kubernetes/real_node.py: containerd and runc, the CNI plugins, nftables for
# kube-proxy) and the image builder's (`tfdist kubernetes image`: mmdebstrap, umoci, skopeo).
DEBIAN_PACKAGES := slurmctld slurmd slurm-client munge prometheus chromium chromium-driver \
	containerd runc containernetworking-plugins nftables conntrack mmdebstrap umoci skopeo
debian-packages:
	@missing=""; for tool in slurmctld slurmd sbatch munged prometheus chromium chromedriver \
	    containerd runc nft conntrack mmdebstrap umoci skopeo /usr/lib/cni/bridge; do \
	  command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	[ -z "$$missing" ] || { echo "installing Debian packages for:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends $(DEBIAN_PACKAGES) >/dev/null; }

slurm: debian-packages

# A real Kubernetes control plane for tests/kubernetes (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler of the release tests/kubernetes/controlplane/go.mod pins, and KWOK), built from the Go module
# proxy and kept outside the clone in ~/.cache/tfdist/kubernetes: about 11 minutes alone the first time on 2
# cores, 25-30 s with Go's build cache warm, nothing once built (tests/kubernetes/build_control_plane.sh).
# `make test` starts it first, in the background, beside the venv's install and the unit tests (there it
# took 16.5 min of a cold 31m47s `make test`), and waits for it before the tests that use it.
kubernetes:
	@bash tests/kubernetes/build_control_plane.sh

kubernetes-start:
	@bash tests/kubernetes/build_control_plane.sh --start

# The worker image (Debian bookworm, TensorFlow 2.21 CPU, tf_keras, tfdist and its examples) that the suite's real
# node runs, built without a Docker daemon by `tfdist kubernetes image` (mmdebstrap, uv, umoci, skopeo) into
# ~/.cache/tfdist/images/tfdist-worker.tar (an OCI archive: `ctr images import`, `skopeo copy`): about a minute
# the first time on 2 cores, 2 s when nothing changed (every layer is cached by a hash of its inputs).
# .venv/.image holds what was built: oci-archive:PATH:TAG@DIGEST.
.PHONY: image
image: $(VENV)/.test
	@$(VENV)/bin/tfdist kubernetes image > $(VENV)/.image.partial && mv $(VENV)/.image.partial $(VENV)/.image
	@cat $(VENV)/.image

demo: $(VENV)/.examples
	$(VENV)/bin/tfdist launch --config examples/digits/config.yaml

# The unit tests run once, through Bazel (two targets, the first in 3 shards: BUILD), beside everything
# that starts processes, which runs under pytest; pytest starts the Bazel run and reports it in its summary,
# above its own summary line, which closes the output (tests/unit_tier.py). Bazel gives each test a HOME of
# its own (so its port leases are not the machine's): its tests lease ports from TFDIST_PORT_RANGE 20000-22767
# (tools/bazel_test.sh), below the range the pytest tier's launches and coordinators lease from. Three pytest
# workers, each test module on one (module fixtures such as a Slurm cluster start once): most of these tests
# wait on processes, sockets, Slurm and the API server rather than the CPU: on 2 cores three at a time ran 141
# tests in 14m16s where two had run 135 in 14m45s. While the control plane's first build is still going,
# tests/kubernetes waits for it in a session of its own and the rest runs beside the build
# (tools/run_tests.sh; docs/development.md).
test: kubernetes-start torch-start $(VENV)/.test $(VENV)/.jax $(VENV)/.plot $(VENV)/.horovod $(VENV)/.torch debian-packages
	@PY=$(PY) bash tools/run_tests.sh

unit: $(VENV)/.test $(VENV)/.jax $(VENV)/.plot
	$(PY) -m pytest -p no:cacheprovider tests/unit

integration: $(VENV)/.test $(VENV)/.jax $(VENV)/.plot $(VENV)/.horovod $(VENV)/.torch
	$(PY) -m pytest -p no:cacheprovider tests/integration

multihost: $(VENV)/.test $(VENV)/.jax $(VENV)/.torch
	$(PY) -m pytest -p no:cacheprovider tests/multihost

# The long gRPC fuzz: every RPC, new random messages each run (make test runs 200 fixed ones per RPC).
fuzz: $(VENV)/.test
	TFDIST_FUZZ_EXAMPLES=$${TFDIST_FUZZ_EXAMPLES:-5000} $(PY) -m pytest -p no:cacheprovider tests/unit/test_grpc_fuzz.py

# The long crash-safety run: >= 100 coordinator kill -9s (figures in docs/benchmarks.md).
chaos: $(VENV)/.test
	$(PY) benchmarks/chaos.py --kills 100

# Failure detection across network-namespace hosts, against TensorFlow's own (root).
bench-failure: $(VENV)/.test
	$(PY) benchmarks/failure_detection.py

# MWMS, Horovod and parameter servers side by side, tfdist against hand-written launchers (root).
bench-modes: $(VENV)/.test $(VENV)/.horovod
	$(PY) benchmarks/modes.py

# `tfdist diagnose` against its variants run by hand as plain launches, and its worker-side clock's cost per
# step (figures in docs/benchmarks.md; about 6 minutes on 2 cores).
bench-diagnose: $(VENV)/.test
	$(PY) benchmarks/diagnose.py

# The coordinator's cost curve (1,000 / 3,000 / 10,000 simulated agents) and a burst of 64 clients at 1,000
# submissions/s with 10,000 queued (figures in docs/benchmarks.md).
bench-scale: $(VENV)/.test
	$(PY) benchmarks/coordinator_scale.py
	$(PY) benchmarks/liveness_scale.py
	$(PY) benchmarks/memory_scale.py

# tfdist on a real Kubernetes node (root): `tfdist launch` to the first training step against the same image's
# script as a plain pod, and the worker image's size, cached build and containerd import (figures in
# docs/benchmarks.md). BENCH_ARGS="--cold" also builds the image from an empty cache (downloads, minutes).
bench-kubernetes: kubernetes $(VENV)/.test $(VENV)/.jax debian-packages
	$(PY) benchmarks/kubernetes_first_step.py $(BENCH_ARGS)

bazel-test: $(VENV)/.test $(VENV)/.jax $(VENV)/.plot $(VENV)/.horovod
	bash tools/bazel_test.sh

clean:
	rm -rf $(VENV) build *.egg-info
