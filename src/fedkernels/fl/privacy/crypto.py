"""The cryptographic primitives of secure aggregation, all from maintained libraries (none written here).

- X25519 key agreement, HKDF-SHA256, ChaCha20-Poly1305 (AEAD), SHA-256 and the ChaCha20 keystream
  used as the mask generator: the ``cryptography`` package (OpenSSL underneath).
- Shamir secret sharing over GF(2^128): ``Crypto.Protocol.SecretSharing.Shamir`` (pycryptodome, the
  implementation Flower's own SecAgg+ uses). The shared secrets are 16-byte seeds (128-bit security),
  one GF(2^128) element each, expanded into 32-byte keys with HKDF: pycryptodome's field arithmetic
  is pure Python, and the server rebuilds one secret per client, so one element a secret instead of
  two halves both the clients' splitting and the server's unmasking.

Requires the optional extra ``fedkernels[privacy]``.
"""

from __future__ import annotations

import os

import torch
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

KEY_BYTES = 32  # X25519 keys, derived keys, mask-generator keys
SEED_BYTES = 16  # a shared secret: one GF(2^128) element
SHARE_BYTES = 16  # one Shamir share of a seed
NONCE_BYTES = 12
TAG_BYTES = 16


class CryptoError(ValueError):
    """A ciphertext failed authentication, a key is malformed, or shares do not reconstruct."""


def new_private_key() -> bytes:
    """A fresh X25519 private key (32 raw bytes) from the OS's CSPRNG."""
    return X25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def public_key(private: bytes) -> bytes:
    """The X25519 public key (32 raw bytes) of a raw private key."""
    sk = X25519PrivateKey.from_private_bytes(private)
    return sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def agree(private: bytes, peer_public: bytes, info: bytes) -> bytes:
    """A 32-byte key both ends derive: HKDF-SHA256 of the X25519 shared secret, bound to ``info``.

    Raises:
        CryptoError: ``peer_public`` is not a usable X25519 public key (e.g. a low-order point).
    """
    try:
        shared = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as e:
        raise CryptoError(f"key agreement failed: {e}") from None
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(shared)


def check_public_key(public: bytes) -> None:
    """Raise :class:`CryptoError` unless ``public`` is an X25519 public key every peer can agree with:
    32 bytes and not a low-order point (whose shared secret is all zeros whatever the peer's key, so a
    client advertising one would make every neighbour's key agreement fail)."""
    if len(public) != KEY_BYTES:
        raise CryptoError(f"public keys are {KEY_BYTES} bytes, got {len(public)}")
    agree(new_private_key(), public, b"fedkernels-key-check")


def expand(seed: bytes, info: bytes) -> bytes:
    """A 32-byte key from a 16-byte ``seed`` (HKDF-SHA256, bound to ``info``): the self-mask
    generator's key and the mask private key both come from shared seeds this way."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seeds are {SEED_BYTES} bytes, got {len(seed)}")
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(seed)


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS's CSPRNG."""
    return os.urandom(n)


def sha256(data: bytes) -> bytes:
    """SHA-256 of ``data`` (commitments to mask seeds)."""
    h = hashes.Hash(hashes.SHA256())
    h.update(data)
    return h.finalize()


def encrypt(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """ChaCha20-Poly1305 under ``key``: random nonce || ciphertext || tag."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)


def decrypt(key: bytes, blob: bytes, aad: bytes) -> bytes:
    """Inverse of :func:`encrypt`. Raises :class:`CryptoError` if the blob was altered or is for another key/aad."""
    if len(blob) < NONCE_BYTES + TAG_BYTES:
        raise CryptoError(f"ciphertext of {len(blob)} bytes is too short")
    try:
        return ChaCha20Poly1305(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag:
        raise CryptoError("ciphertext failed authentication") from None


def mask_stream(seed: bytes, n: int, bits: int, label: bytes = b"") -> torch.Tensor:
    """``n`` ring elements uniform in ``[0, 2**bits)`` from the ChaCha20 keystream of ``seed``.

    The keystream under a 32-byte key is indistinguishable from uniform bytes; 32-bit (``bits <= 32``)
    or 64-bit words keep their low ``bits`` bits, which are then uniform too. ``label`` (at most 16
    bytes) separates streams drawn from one seed.

    Returns:
        int64 ``[n]``.
    """
    if len(seed) != KEY_BYTES or len(label) > 16:
        raise ValueError("mask seeds are 32 bytes and labels at most 16")
    word = 4 if bits <= 32 else 8
    nonce = label.ljust(16, b"\0")
    enc = Cipher(algorithms.ChaCha20(seed, nonce), mode=None).encryptor()
    raw = bytearray(enc.update(bytes(n * word)))
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    if word == 4:
        out = torch.frombuffer(raw, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF
    else:
        out = torch.frombuffer(raw, dtype=torch.int64).clone()
    return out & ((1 << bits) - 1)


def split_secret(secret: bytes, threshold: int, num: int) -> list[bytes]:
    """Shamir shares of a 16-byte ``secret``: any ``threshold`` of the ``num`` shares rebuild it,
    fewer reveal nothing about it. Share ``i`` (0-based) belongs to holder index ``i + 1``."""
    if len(secret) != SEED_BYTES:
        raise ValueError(f"secrets are {SEED_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= num:
        raise ValueError(f"need 1 <= threshold <= num, got {threshold}, {num}")
    if threshold == 1:  # pycryptodome needs a degree >= 1 polynomial; one share then is the secret
        return [secret] * num
    return [share for _, share in Shamir.split(threshold, num, secret, ssss=False)]


def combine_shares(shares: dict[int, bytes], threshold: int) -> bytes:
    """The secret from at least ``threshold`` shares ``{holder index (1-based): share}``.

    Shamir's combine returns *some* value from any shares; callers check it against a commitment
    (a public key or a SHA-256), since a wrong share yields a wrong secret, not an error.
    """
    if len(shares) < threshold:
        raise CryptoError(f"{len(shares)} shares cannot rebuild a secret that needs {threshold}")
    if any(len(s) != SHARE_BYTES for s in shares.values()):
        raise CryptoError(f"shares are {SHARE_BYTES} bytes")
    use = sorted(shares.items())[:threshold]  # exactly threshold: combine's work grows as its square
    if threshold == 1:
        return use[0][1]
    return Shamir.combine(use, ssss=False)
