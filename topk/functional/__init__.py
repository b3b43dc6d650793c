"""The numerical cores of the losses, as plain functions on tensors."""
