"""Encryption at rest of stored kubeconfigs (Fernet: AES-128-CBC + HMAC-SHA256, with a timestamp).

The first configured key encrypts; every configured key decrypts, so a new key is rolled out by
putting it first, running ``python -m trainwatch_registry rotate-key`` (which re-encrypts every
row with it), and then removing the old key from the settings.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


class EncryptionKeyError(ValueError):
    """No usable key is configured, or a stored value was written with a key we no longer have."""


class Encryptor:
    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise EncryptionKeyError(
                "no encryption key: set TRAINWATCH_REGISTRY_ENCRYPTION_KEYS or "
                "TRAINWATCH_REGISTRY_ENCRYPTION_KEY_FILE "
                "(make one with `python -m trainwatch_registry generate-key`)"
            )
        fernets: list[Fernet] = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.encode()))
            except (ValueError, TypeError):
                # Never echo the key: say which one is wrong.
                raise EncryptionKeyError(
                    f"encryption key #{position} is not a Fernet key (32 url-safe base64-encoded bytes)"
                ) from None
        self._primary = fernets[0]
        self._all = MultiFernet(fernets)

    @staticmethod
    def generate_key() -> str:
        return Fernet.generate_key().decode()

    def encrypt(self, plaintext: str) -> bytes:
        return self._primary.encrypt(plaintext.encode())

    def decrypt(self, token: bytes) -> str:
        try:
            return self._all.decrypt(token).decode()
        except InvalidToken:
            raise EncryptionKeyError(
                "a stored kubeconfig cannot be decrypted with the configured keys"
            ) from None

    def rotate(self, token: bytes) -> bytes:
        """The same plaintext, encrypted with the primary key."""
        try:
            return self._all.rotate(token)
        except InvalidToken:
            raise EncryptionKeyError(
                "a stored kubeconfig cannot be decrypted with the configured keys"
            ) from None
