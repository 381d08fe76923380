"""The UI's routes (namespace ``forqapp-ui``). Mounted at ``ui/`` by :mod:`forqapp.urls` and at the
root of the UI listener by ``project.urls_ui``."""

from django.urls import path

from . import keys, moves, schedules, tasks, views

app_name = "forqapp-ui"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.login, name="login"),
    path("logout/", views.logout, name="logout"),
    path("queues/<str:queue>/", views.queue_page, name="queue"),
    path("queues/<str:queue>/pause/", views.pause_queue, name="pause"),
    path("queues/<str:queue>/resume/", views.resume_queue, name="resume"),
    path("queues/<str:queue>/flow/", views.queue_flow, name="flow"),
    path("queues/<str:queue>/messages/", views.queue_messages, name="messages"),
    path("queues/<str:queue>/moves/", moves.queue_moves, name="moves"),
    path("queues/<str:queue>/moves/<str:handle>/cancel/", moves.cancel_move, name="move-cancel"),
    path("queues/<str:queue>/messages/<str:message_id>/", views.message_detail, name="message"),
    path("queues/<str:queue>/messages/<str:message_id>/requeue/", views.requeue_message, name="requeue"),
    path("schedules/", schedules.schedules_page, name="schedules"),
    path("schedules/<str:name>/pause/", schedules.pause_schedule, name="schedule-pause"),
    path("schedules/<str:name>/resume/", schedules.resume_schedule, name="schedule-resume"),
    path("schedules/<str:name>/run/", schedules.run_schedule, name="schedule-run"),
    path("tasks/", tasks.tasks_page, name="tasks"),
    path("tasks/<str:result_id>/", tasks.task_detail, name="task"),
    path("keys/", keys.keys_page, name="keys"),
    path("keys/create/", keys.create_key, name="key-create"),
    path("keys/<str:access_key_id>/revoke/", keys.revoke_key, name="key-revoke"),
    path("keys/<str:access_key_id>/rotate/", keys.rotate_key, name="key-rotate"),
]
