"""torch.linalg's checked routines read their error codes to the host on a device: `implicit:linalg_check`.

torch's docs say of `cholesky`, `inv`, `solve`, `lu_factor`, `ldl_factor`, `eigh`, `eigvalsh`, `eig`, `eigvals`,
`svdvals`, `matrix_rank`, `pinv` and `cond` that on a CUDA device each "synchronizes that device with the CPU": it
reads the LAPACK-style `info` codes to raise on a singular or non-positive-definite input. None of their ops is tagged
data-dependent, so none was counted, on a CPU run or a GPU. Their `_ex` forms read them only with
`check_errors=True`; `det`, `qr` and `slogdet` read nothing. Counted by the kernels and by the dispatch mode alike,
inside `torch.inference_mode` too (where the mode meets the public ops before they decompose). Run on a GPU (the
device check's test step), the last test holds the count against torch's own sync detector.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
LINALG = torch.linalg
CHECK = "implicit:linalg_check"


def matrices() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(4, 4, generator=generator)
    return (a @ a.T + torch.eye(4)).to(DEVICE), torch.randn(4, 2, generator=generator).to(DEVICE)


def checks(body: Callable[[], object]) -> int:
    with SyncCounter() as counter, hot_path("region"):
        body()
    return counter.counts_by_kind("region").get(CHECK, 0)


READING: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "cholesky": lambda a, b: LINALG.cholesky(a),
    "inv": lambda a, b: LINALG.inv(a),
    "inverse": lambda a, b: torch.inverse(a),
    "solve": lambda a, b: LINALG.solve(a, b),
    "lu_factor": lambda a, b: LINALG.lu_factor(a),
    "eigh": lambda a, b: LINALG.eigh(a),
    "eigvalsh": lambda a, b: LINALG.eigvalsh(a),
    "svd": lambda a, b: LINALG.svd(a),
    "svdvals": lambda a, b: LINALG.svdvals(a),
    "matrix_rank": lambda a, b: LINALG.matrix_rank(a),
    "pinv": lambda a, b: LINALG.pinv(a),
    "cond": lambda a, b: LINALG.cond(a),
    "matrix_norm(2)": lambda a, b: LINALG.matrix_norm(a, 2),
    "cholesky_ex(check_errors=True)": lambda a, b: LINALG.cholesky_ex(a, check_errors=True),
    "inv_ex(check_errors=True)": lambda a, b: LINALG.inv_ex(a, check_errors=True),
}
SILENT: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "det": lambda a, b: LINALG.det(a),
    "slogdet": lambda a, b: LINALG.slogdet(a),
    "qr": lambda a, b: LINALG.qr(a),
    "cholesky_ex": lambda a, b: LINALG.cholesky_ex(a),
    "inv_ex": lambda a, b: LINALG.inv_ex(a),
    "matrix_norm": lambda a, b: LINALG.matrix_norm(a),
    "solve_triangular": lambda a, b: LINALG.solve_triangular(a, b, upper=True),
}


@pytest.mark.parametrize("name", list(READING))
@pytest.mark.parametrize("inference", [False, True])
def test_each_checked_routine_is_one_read(name: str, inference: bool, counting: str) -> None:
    a, b = matrices()

    def body() -> None:
        with torch.inference_mode(inference):
            READING[name](a, b)

    assert checks(body) == 1


@pytest.mark.parametrize("name", list(SILENT))
def test_the_routines_that_check_nothing_are_not_counted(name: str, counting: str) -> None:
    a, b = matrices()
    assert checks(lambda: SILENT[name](a, b)) == 0


def test_the_backward_of_a_checked_routine_is_not_a_second_read(counting: str) -> None:
    a, _ = matrices()
    leaf = a.clone().requires_grad_()
    assert checks(lambda: LINALG.cholesky(leaf @ leaf.mT).sum().backward()) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_no_line_tripwire_missed() -> None:
    a, b = matrices()
    with SyncCounter(cuda_cross_check=True) as counter:
        for routine in READING.values():
            routine(a, b)
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind().get(CHECK) == len(READING)
