"""How every turnledger service reaches Redis: plaintext or TLS (`rediss://`), with or without a login.

Managed Redis (ElastiCache with in-transit encryption and AUTH or RBAC, Redis Cloud, Upstash, Azure
Cache) is reached as `rediss://user:password@host:port/0`, often with a private CA. `settings` reads
what is not in the URL (REDIS_SSL_CA_FILE, REDIS_PASSWORD_FILE), `client.redis_client` builds every
client with it, `refusals` tells a refusal (`RedisAccessError`: a wrong password, a certificate we
cannot verify) from an outage (`RedisUnavailableError`, waited out), and `probe` finds the refusals
that look like outages (the wrong protocol for the port). `naming` names a client without its password.
`sentinel` reads `redis+sentinel://` URLs (the primary the sentinels name), `cluster` `redis+cluster://`
ones (a Redis Cluster, and the one hash slot a projection's keys share).
"""
