#!/usr/bin/env python3
"""Mints a JWT with PyJWT (python3-jwt), independently of `portcullis mint`, so the
end-to-end tests check the gateway against tokens shaped as the apps' own backends (or
Google, Apple, Firebase) issue them.

Usage: mint_jwt.py SECRET CLAIMS_JSON                    HS256 with SECRET
       mint_jwt.py --rs256 KEY_PEM KID CLAIMS_JSON       RS256 with a PEM private key, `kid` header
CLAIMS_JSON is the payload; "exp": "+N" / "iat": "-N" are made relative to now (seconds).
Prints the token.
"""
import json
import sys
import time

import jwt

args = sys.argv[1:]
if args[0] == "--rs256":
    with open(args[1], "rb") as f:
        key = f.read()
    algorithm, headers, claims = "RS256", {"kid": args[2]}, json.loads(args[3])
else:
    key, algorithm, headers, claims = args[0], "HS256", None, json.loads(args[1])
now = int(time.time())
for name in ("exp", "iat", "nbf", "auth_time"):
    value = claims.get(name)
    if isinstance(value, str) and value[:1] in "+-":
        claims[name] = now + int(value)
print(jwt.encode(claims, key, algorithm=algorithm, headers=headers))
