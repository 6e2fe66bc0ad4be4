"""tfdist's control plane: config, launchers, (later) coordinator and agents.

Never imports TensorFlow: it runs on head nodes that do not have it.
"""
