"""What the tests share: servers and proxies they start (gunicorn, nginx, npm-installed clients),
clients they speak with (HTTP, the protocol core in process, OAuth flows), fuzzing strategies, clocks
and waits. No test module imports another: what two of them need lives here."""
