"""Fault plugins: each re-introduces one known class of device bug into a healthy device.

Load one with ``-p tests.faults.<name>`` next to ``-p flagos --flagos-device=DEVICE``; it
patches the device at configure time through the registries a vendor's own code uses
(inductor's DeviceInterface and device-op-override registries, register_backend_for_device,
dynamo's backend registry, Triton's active driver, torch.library, the device module), never
by editing product code, and only for the device it applies to. ``catalog.py`` lists them
with the conformance area that must catch each; ``runner.py`` runs them
(tests/test_sensitivity.py, benchmarks/sensitivity.py).
"""
