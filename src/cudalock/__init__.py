"""cudalock: a PyTorch stack that this machine's NVIDIA driver and GPUs can run, locked."""

__version__ = "0.1.0"
