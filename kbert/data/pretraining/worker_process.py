"""Settings for a process that only runs pre-training data tasks: a pool worker or a Beam worker.

`create_pretraining_data`'s pool workers (`local_runner`) and its Apache Beam
workers (`beam_pipeline`) each run one `ChunkProcessor` per core; both call
`tune_worker_process` once before their first task.
"""

from __future__ import annotations

import ctypes

import tensorflow as tf


def tune_worker_process() -> None:
    """Settings for a process that only runs tasks (a pool or Beam worker), one per core.

    TensorFlow gets one thread per pool: the workers already use every core,
    and TensorFlow's default pools (a thread per core each) would only
    contend for them. glibc keeps freed memory (`_keep_freed_memory`). Call
    it before the process runs TensorFlow ops; afterwards the thread
    settings can no longer change and are left as they are.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow's runtime already started in this process.
        pass
    _keep_freed_memory()


def _keep_freed_memory() -> None:
    """Has glibc keep freed memory for reuse in this (worker) process.

    Each task allocates and frees ~100 MB of numpy temporaries. By default
    glibc gives them back to the OS and the next task faults the pages in
    again: about a million page faults and 1.5 s of kernel time for 48 MB at
    dupe_factor 5. Keeping them costs no extra memory at peak (the same pages
    are reused). `mallopt` is glibc's documented interface; elsewhere this
    does nothing. Only worker processes call it: the caller's process keeps
    its own settings.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # From glibc's malloc.h.
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value.
    mallopt(m_trim_threshold, 1 << 30)
