"""A killed switch of a segment's new copy (rewrite, erase), for a child process to run.

``KILL_AT_SWITCH`` is the head of a ``python -c`` script: with ``sys.argv[2]`` ``"switch"`` the
process dies right after the second segment's switch commits; otherwise during the second
upload, its log put and never its manifest. The script's tail opens the context (``sys.argv[1]``
is the config) and runs the driver.
"""

from __future__ import annotations

import textwrap

KILL_AT_SWITCH = textwrap.dedent(
    """
    import os, signal, sys
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.storage.layout import ObjectKind
    from tiering_core.storage.remote import RemoteStorage

    where = sys.argv[2]
    switch = RemoteLogMetadataStore.supersede_segment
    copy = RemoteStorage.copy_segment
    done = []

    def switch_then_die(self, *args, **kwargs):  # the second segment's switch commits, then the end
        meta = switch(self, *args, **kwargs)
        done.append(meta)
        if len(done) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return meta

    def upload_then_die(self, ref, files, **kwargs):  # the second upload: its log, never its manifest
        if done:
            self.put_object(ref.key(ObjectKind.LOG, self.prefix), files[ObjectKind.LOG])
            os.kill(os.getpid(), signal.SIGKILL)
        manifest = copy(self, ref, files, **kwargs)
        done.append(manifest)
        return manifest

    if where == "switch":
        RemoteLogMetadataStore.supersede_segment = switch_then_die
    else:
        RemoteStorage.copy_segment = upload_then_die
    """
)
