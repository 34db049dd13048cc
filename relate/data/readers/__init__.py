"""Readers for the OV-SGG-Bench sources in their native layouts, into the project schema.

``read_benchmark(name, path, **kw)`` looks a reader up by registry name: vg150, indoorvg, psg,
haystack, hico_det, spatialsense.
"""

from relate.data.readers.base import (CELLS_SCHEMA, IMAGE_NAMESPACES, READERS, BenchmarkData, EmptySplitError,
                                      exclude_images, image_key, image_namespace, load_exclusions,
                                      normalise_image_id, parse_image_key, read_benchmark)
from relate.data.readers.hico import read_hico_det
from relate.data.readers.psg import read_haystack, read_psg
from relate.data.readers.spatialsense import read_spatialsense
from relate.data.readers.vg150 import read_indoorvg, read_vg150, read_vg_h5

__all__ = ["CELLS_SCHEMA", "IMAGE_NAMESPACES", "READERS", "BenchmarkData", "EmptySplitError", "exclude_images",
           "image_key", "image_namespace", "parse_image_key", "load_exclusions",
           "normalise_image_id", "read_benchmark", "read_vg150", "read_indoorvg",
           "read_vg_h5", "read_psg", "read_haystack", "read_hico_det", "read_spatialsense"]
