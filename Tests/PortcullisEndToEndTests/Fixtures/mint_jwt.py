#!/usr/bin/env python3
"""Mints an HS256 JWT with PyJWT (python3-jwt), independently of `portcullis mint`, so the
end-to-end tests check the gateway against tokens shaped as the apps' own backends issue them.

Usage: mint_jwt.py SECRET CLAIMS_JSON
CLAIMS_JSON is the payload; "exp": "+N" / "iat": "-N" are made relative to now (seconds).
Prints the token.
"""
import json
import sys
import time

import jwt

secret, claims = sys.argv[1], json.loads(sys.argv[2])
now = int(time.time())
for key in ("exp", "iat", "nbf"):
    value = claims.get(key)
    if isinstance(value, str) and value[:1] in "+-":
        claims[key] = now + int(value)
print(jwt.encode(claims, secret, algorithm="HS256"))
