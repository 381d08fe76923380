from django.test import override_settings

from forqapp.models import Message
from forqapp.routers import ForqRouter


def test_router_sends_forqapp_models_to_the_queue_alias():
    router = ForqRouter()
    with override_settings(FORQ_DATABASE="queue"):
        assert router.db_for_read(Message) == "queue"
        assert router.db_for_write(Message) == "queue"
        assert router.allow_migrate("queue", "forqapp") is True
        assert router.allow_migrate("default", "forqapp") is False
        assert router.allow_migrate("default", "auth") is None
