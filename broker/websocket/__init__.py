"""Apache Pulsar's WebSocket API (``webSocketServiceEnabled``): service.py serves the endpoints, client.py is the
service's client of the binary protocol, producer.py and consumer.py the sessions, options.py and messages.py the
query options and the JSON. See docs/websocket.md."""
