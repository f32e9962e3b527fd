"""dlkit: the helpers the Deep Learning Hardware and Software notebooks import.

Plain functions, each in a small module: devices, seeding, benchmarking, checks, plots.
Importing dlkit is cheap: torch and TensorFlow are imported only by the functions that need them.
"""

from . import domains
from .bench import Timing, benchmark, grading
from .checks import (
                     assert_close,
                     assert_no_float64,
                     assert_same_placement,
                     called_functions,
                     dispatched_ops,
                     in_kernel,
                     rel_error,
                     tolerances_for,
)
from .convert import to_numpy
from .datasets import data_file
from .devices import (
                     as_torch_device,
                     default_device,
                     has_float64,
                     is_colab,
                     synchronize,
                     test_devices,
                     tf_devices,
                     torch_devices,
)
from .hardware import cpu_peak_flops, device_name, device_peak_flops, gpu_peak_flops
from .launch import LaunchTimeout, WorkerError, free_port, launch
from .ondevice import SkipDevice, check_on_devices
from .plots import bar_plot, line_plot
from .runtime import report_runtime
from .seeding import seed_everything

__all__ = [
    "Timing", "benchmark", "grading", "assert_close", "assert_no_float64", "dispatched_ops", "called_functions",
    "in_kernel", "assert_same_placement",
    "rel_error", "tolerances_for", "to_numpy", "data_file", "as_torch_device", "default_device", "is_colab",
    "synchronize", "test_devices", "check_on_devices", "SkipDevice", "has_float64", "tf_devices", "torch_devices",
    "cpu_peak_flops", "device_name", "device_peak_flops", "gpu_peak_flops", "bar_plot", "line_plot", "seed_everything",
    "launch", "free_port", "WorkerError", "LaunchTimeout", "report_runtime", "domains",
]
__version__ = "0.1.0"
