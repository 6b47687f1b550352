"""The cleaning operator (a T x T problem) is built with BLAS on one thread, every BLAS
loaded (numpy's and scipy's), however often it is built."""

import nilearn.signal
import numpy as np
from threadpoolctl import threadpool_info

from connscale._operator import cleaning_operator, residual_dof


def test_the_operator_is_built_on_one_blas_thread(monkeypatch):
    seen = []
    clean = nilearn.signal.clean

    def spy(*args, **kwargs):
        seen.append(
            {
                lib["filepath"]: lib["num_threads"]
                for lib in threadpool_info()
                if lib["user_api"] == "blas"
            }
        )
        return clean(*args, **kwargs)

    monkeypatch.setattr(nilearn.signal, "clean", spy)
    confounds = np.random.default_rng(0).standard_normal((40, 3))
    for _ in range(2):
        operator = cleaning_operator(40, confounds=confounds)
        assert residual_dof(operator, confounds=confounds)["dof"] == 35
    assert len(seen) == 2 and all(seen)
    assert {n for threads in seen for n in threads.values()} == {1}
