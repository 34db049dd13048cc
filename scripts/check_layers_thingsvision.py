"""The probe's layer sweep against thingsvision's own extraction, on a tiny random-weight timm ViT.

thingsvision cannot be a dependency of this project: its requirements pin torch 2.0.1 (and pull in
TensorFlow), and the project needs torch 2.14. Its PyTorch extraction path needs neither, so this
check loads the package from a side folder, without its dependencies:

    pip install --target /tmp/tv --no-deps thingsvision==2.7.3 torchtyping typeguard==2.13.3
    PYTHONPATH=/tmp/tv:. HF_HUB_OFFLINE=1 python scripts/check_layers_thingsvision.py

TensorFlow and Keras, which thingsvision imports at load time for its Keras extractors, are
replaced by empty modules, and ``numpy.AxisError`` (gone in numpy 2) is restored from
``numpy.exceptions``. Nothing of thingsvision's PyTorch path is changed. For every block of the
model, thingsvision's forward-hook activation of ``blocks.{k}`` is pooled as its own
``token_extraction="avg_pool"`` pools a ViT (the mean over the tokens after the class token) and
compared with ``encode_layers(..., pool="avg")``, which the probe job's layer sweep reads. The
continuous test of the same sweep (tests/unit/test_probe_layer_reference.py) uses torchvision's
feature extractor, which CI can install.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class _Empty(types.ModuleType):
    """An empty module: any attribute is another empty module, any call returns []."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _Empty(f"{self.__name__}.{name}")
        sub.__path__ = []
        return sub

    def __call__(self, *args, **kwargs):
        return []


class _EmptyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOTS = ("tensorflow", "keras")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _Empty(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module) -> None:
        pass


def main() -> int:
    import numpy as np

    sys.meta_path.insert(0, _EmptyFinder())
    if not hasattr(np, "AxisError"):
        np.AxisError = np.exceptions.AxisError
    import thingsvision
    from PIL import Image
    from thingsvision import get_extractor_from_model

    from relate.zoo import create_extractor

    ex = create_extractor("test_vit")  # random weights, CPU
    rng = np.random.default_rng(0)
    ims = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(4)]
    depth = len(ex.model.blocks)
    ours = ex.encode_layers(ims, list(range(depth)))
    tv = get_extractor_from_model(model=ex.model, device="cpu", backend="pt")
    worst = 0.0
    for k in range(depth):
        with tv.batch_extraction(module_name=f"blocks.{k}", output_type="ndarray") as e:
            act = e.extract_batch(batch=ex.to_tensor(ims), flatten_acts=False)  # [N, tokens, D]
        pooled = act[:, ex.model.num_prefix_tokens:, :].mean(axis=1)
        diff = float(np.abs(pooled - ours[f"block{k}"]).max())
        worst = max(worst, diff)
        print(f"blocks.{k}: thingsvision {act.shape} -> pooled {pooled.shape}; max |ours - thingsvision| = {diff:.2e}")
    apart = min(float(np.abs(ours[f"block{k}"] - ours[f"block{k + 1}"]).max()) for k in range(depth - 1))
    print(f"smallest difference between adjacent blocks (so equality is not trivial): {apart:.2e}")
    ok = worst < 1e-5 < apart
    print(f"thingsvision {thingsvision.__version__}: {'equal' if ok else 'NOT equal'} (worst {worst:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
