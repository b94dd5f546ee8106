#!/usr/bin/env python3
"""Verifies a Portcullis identity assertion with an independent library (PyJWT), as an
app would: the key chosen by `kid` from the gateway's JWKS, the algorithm pinned,
issuer and audience checked, expiry required.

Usage: verify_assertion.py JWKS_FILE TOKEN ISSUER AUDIENCE ALGORITHM [HS256_SECRET]
Prints the claims as JSON and exits 0, or prints the reason and exits 1.
"""
import json
import sys

import jwt

jwks_file, token, issuer, audience, algorithm = sys.argv[1:6]
try:
    if algorithm == "HS256":
        key = sys.argv[6]
    else:
        kid = jwt.get_unverified_header(token).get("kid")
        keys = jwt.PyJWKSet.from_json(open(jwks_file).read()).keys
        matching = [k for k in keys if k.key_id == kid]
        if not matching:
            raise jwt.InvalidTokenError(f"no key with kid {kid!r} in the JWKS")
        key = matching[0].key
    claims = jwt.decode(token, key, algorithms=[algorithm], issuer=issuer, audience=audience,
                        options={"require": ["exp", "iat", "iss", "aud", "sub", "jti"]})
    print(json.dumps(claims))
except Exception as error:  # noqa: BLE001 - the reason is the output
    print(f"{type(error).__name__}: {error}")
    sys.exit(1)
