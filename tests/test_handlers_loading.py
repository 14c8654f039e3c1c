"""jupyter_serve.handlers.loading: eager weights mapped from their file, or a private copy.

Where a tensor lives is read from this process's own memory map
(`/proc/self/maps`): a mapped weight's data pointer falls inside a mapping of the
weights file; a copied one does not.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from jupyter_serve.handlers import loading

torch = pytest.importorskip("torch")

MODEL_FILE = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(64, 32)
        self.out = torch.nn.Linear(32, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x))) * self.scale
"""


def file_mappings(path: Path) -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of `path`."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(path.resolve()):
            start, end = (int(part, 16) for part in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def mapped_from(model: torch.nn.Module, path: Path) -> list[bool]:
    """For each tensor of `model`: does its data live in a mapping of `path`?"""
    ranges = file_mappings(path)
    tensors = [*model.parameters(), *model.buffers()]
    return [any(start <= t.data_ptr() < end for start, end in ranges) for t in tensors]


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """model.py defining `Net`, and a state dict of a trained-looking `Net` in weights.pt."""
    (tmp_path / "model.py").write_text(MODEL_FILE)
    net = loading.model_class(loading.import_model_file(tmp_path / "model.py"))()
    state = {name: torch.randn_like(value) for name, value in net.state_dict().items()}
    torch.save(state, tmp_path / "weights.pt")
    return tmp_path, state


def same_values(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    loaded = model.state_dict()
    return set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)


def test_eager_weights_are_mapped_from_the_file_not_copied(
    saved: tuple[Path, dict[str, torch.Tensor]],
) -> None:
    folder, state = saved
    model = loading.load_eager_model(
        folder / "model.py", folder / "weights.pt", torch.device("cpu")
    )
    assert same_values(model, state)
    assert mapped_from(model, folder / "weights.pt") == [True] * 5  # 4 parameters, 1 buffer
    assert model(torch.ones(2, 64)).shape == (2, 4)


def test_a_legacy_format_file_is_loaded_as_a_private_copy_saying_why(
    saved: tuple[Path, dict[str, torch.Tensor]], caplog: pytest.LogCaptureFixture
) -> None:
    folder, state = saved
    legacy = folder / "legacy.pt"
    torch.save(state, legacy, _use_new_zipfile_serialization=False)  # cannot be mapped
    caplog.set_level(logging.DEBUG, logger=loading.__name__)
    model = loading.load_eager_model(folder / "model.py", legacy, torch.device("cpu"))
    assert same_values(model, state)
    assert not any(mapped_from(model, legacy))
    [line] = [r.getMessage() for r in caplog.records if r.name == loading.__name__]
    assert line.startswith("Loading legacy.pt as a private copy, not mapped: ")


def test_weights_of_another_dtype_are_converted_as_before_not_assigned(
    saved: tuple[Path, dict[str, torch.Tensor]], caplog: pytest.LogCaptureFixture
) -> None:
    folder, state = saved
    half = folder / "half.pt"
    torch.save({name: value.half() for name, value in state.items()}, half)
    caplog.set_level(logging.DEBUG, logger=loading.__name__)
    model = loading.load_eager_model(folder / "model.py", half, torch.device("cpu"))
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the model's, as before
    assert "is torch.float16 in the file but torch.float32 in the model" in caplog.text


def test_a_custom_handler_can_share_weights_into_its_own_model(
    saved: tuple[Path, dict[str, torch.Tensor]],
) -> None:
    folder, state = saved
    net = loading.model_class(loading.import_model_file(folder / "model.py"))()
    model = loading.load_shared_weights(net, folder / "weights.pt")
    assert model is net
    assert same_values(model, state)
    assert all(mapped_from(model, folder / "weights.pt"))
