"""forqapp's SQS-compatible face (docs: how-to/sqs.md, reference/sqs.md): Amazon SQS's JSON 1.0 protocol (and its
older query protocol) on its own listener,
``FORQ_SQS_ADDR``, so that code written for SQS (boto3, the AWS CLI, every AWS SDK) runs against
forqapp by changing its endpoint URL.

* :mod:`.protocol` — the wire: errors as SQS shapes (``__type``, ``x-amzn-query-error``), answers;
* :mod:`.query` — the query protocol's wire (form-encoded requests, XML answers), driven by SQS's
  query-era API model (``model/``);
* :mod:`.sigv4` — AWS Signature Version 4, verified against :mod:`forqapp.keys`;
* :mod:`.digests` — ``MD5OfMessageBody`` and ``MD5OfMessageAttributes`` as AWS computes them;
* :mod:`.receipts` — receipt handles (opaque, signed, one per delivery);
* :mod:`.queues` — queue names, URLs, ARNs and attributes, mapped onto forqapp's queue policy
  (FIFO queues: ``.fifo`` names, their attributes);
* :mod:`.messages` — bodies, message attributes, FIFO's group and deduplication ids, receive answers;
* :mod:`.attempts` — ``ReceiveRequestAttemptId``: a retried receive's messages;
* :mod:`.actions` — one function per SQS action, calling :mod:`forqapp.services`;
* :mod:`.asgi` — the listener's ASGI application (``forq_serve`` starts it when the setting is set).

The queues are forqapp's own: a message sent here is received by every other face, and back.
"""
