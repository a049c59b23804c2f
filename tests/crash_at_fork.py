"""A handler module that imports fine in the master but kills every child it is forked into,
like a native library whose state does not survive fork."""

import os


def _die_in_child() -> None:
    os._exit(66)


os.register_at_fork(after_in_child=_die_in_child)


def handler(**_: object) -> None:
    pass
