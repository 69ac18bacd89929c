"""moestat.devices.resolve_device: one meaning of --device / device= everywhere."""

import pytest
import torch

from moestat.devices import resolve_device

NO_CUDA = not torch.cuda.is_available()


def test_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" cpu ") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    expected = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_refused_in_one_line_without_cuda(name):
    if not NO_CUDA:
        pytest.skip("CUDA is available here: the refusal is for machines without it")
    with pytest.raises(ValueError) as ei:
        resolve_device(name)
    msg = str(ei.value)
    assert "CUDA is not available" in msg and repr(name) in msg and "\n" not in msg


def test_cuda_index_checked_when_cuda_present():
    if NO_CUDA:
        pytest.skip("needs CUDA")
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize("bad", ["gpu", "mps", "cuda:", "cuda:x", "cuda:\u00b2", "CPU", "", 0, None])
def test_unknown_devices_refused_in_one_line(bad):
    with pytest.raises(ValueError) as ei:
        resolve_device(bad)
    msg = str(ei.value)
    assert "cpu, cuda, cuda:N or auto" in msg and "\n" not in msg
