"""The rehearsal's worker-host app: a consumer and a Django task, each recording what it ran."""
