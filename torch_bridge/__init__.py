"""The "npu" PyTorch device backed by the archsim simulator (work in progress)."""


def _autoload() -> None:
    """Entry point called by ``import torch`` (group ``torch.backends``)."""
