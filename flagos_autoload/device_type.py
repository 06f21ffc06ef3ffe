"""The device type string: what PrivateUse1 is renamed to, and ``torch.flagos``'s name.

A leaf (it imports nothing), so that flagos_autoload and torch_fl share one spelling
without flagos_autoload importing torch_fl, whose import takes PrivateUse1.
"""

DEVICE_TYPE = "flagos"
