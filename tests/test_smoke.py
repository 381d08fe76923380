import pytest

import forqapp


@pytest.mark.django_db(transaction=True)
def test_send_receive_ack_round_trip():
    message_id = forqapp.send("smoke", "hello")
    message = forqapp.receive("smoke")
    assert (message.id, message.content, message.attempts) == (message_id, "hello", 1)
    forqapp.ack(message)
    assert forqapp.receive("smoke") is None
