"""torch's packed sequences: the batch sizes and lengths torch keeps in host memory, marked as host memory.

A `PackedSequence`'s `batch_sizes` is a CPU tensor on every device (torch refuses another), and so are the lengths
`pad_packed_sequence` returns. An LSTM over a packed batch reads `int(batch_sizes[0])` in its forward, and a loop may
read the lengths (`lengths.tolist()`): no wait on a GPU. torch builds them inside its own ops, where nothing marks
them, so both runs counted each read. While a counter runs, `PackedSequence.__new__` and `pad_packed_sequence` are
swapped (`tripwire.sync.swaps`) to mark them as a loop's own host tensors are (`explicit.mark_host_results`): their
reads, and what the loop computes of them alone (`int(lengths.max())`).
The index uploads around them are counted where torch makes them (`copies.to_kind`: `pack_padded_sequence`'s
`sorted_indices.to(input.device)`; `pad_packed_sequence`'s `unsorted_indices.cpu()` is a read of device memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tripwire.sync.explicit import mark_host_results
from tripwire.sync.installation import Installation, swap_in

__all__ = ["watch_packed"]


def _packed(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`PackedSequence(data, batch_sizes, ...)`: its batch sizes marked."""
    result = original(*args, **kwargs)  # pass-through
    mark_host_results(getattr(result, "batch_sizes", None))
    return result


def _padded(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`pad_packed_sequence(sequence)`: the lengths it returns marked."""
    result = original(*args, **kwargs)  # pass-through
    if isinstance(result, tuple) and len(result) == 2:
        mark_host_results(result[1])
    return result


def watch_packed(installation: Installation) -> None:
    """Swap the code of `PackedSequence.__new__` and `pad_packed_sequence` (`torch.nn.utils.rnn`)."""
    from torch.nn.utils import rnn

    new = vars(rnn.PackedSequence).get("__new__")
    for function, counted in ((getattr(new, "__func__", None), _packed), (rnn.pad_packed_sequence, _padded)):
        swap_in(installation, function, counted)
