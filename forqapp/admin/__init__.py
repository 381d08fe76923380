"""Django admin: queues (policy, state, counts, flow control; pause, resume, purge), schedules
(edit, pause, resume, run now, delete), every message, and the dead letters on their own list.

Nothing here writes to the database itself: a queue's policy is saved by
``services.configure_queue`` after the form checked it with ``validation.policy`` (the rules of
``forqapp.configure_queue``, the v2 API and ``FORQ_QUEUES``); pause, resume, purge, requeue and delete
are admin actions that call :mod:`forqapp.services`, the destructive ones behind a confirmation page.
A schedule is checked by ``schedules.validate`` and saved by ``schedules.schedule``; pause, resume,
run now and delete call :mod:`forqapp.services.schedules` too. Messages are read-only. Anything from a message or a queue is escaped (``format_html``).

One module per model: :mod:`.messages` (every message and the dead letters; their list filters in
:mod:`.filters`), :mod:`.queues` and :mod:`.schedules`; :mod:`.cells` makes the lists' cells.
"""

from __future__ import annotations

# The modules register their ModelAdmins when imported (Django's admin autodiscovery imports this
# package); so do the API keys' and the task results' admins.
from ..keys import admin as keys_admin  # noqa: F401 - registers the API keys' admin
from ..tasks import admin as tasks_admin  # noqa: F401 - registers the task results' admin
from . import messages, queues, schedules  # noqa: F401 - register their ModelAdmins
