from cryptography.fernet import Fernet

from computeshare.fields import EncryptedTextField, _fernet_for


def test_encrypted_text_round_trips_and_is_not_stored_in_clear(settings):
    settings.FIELD_ENCRYPTION_KEY = Fernet.generate_key().decode()
    field = EncryptedTextField()
    secret = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n-----END OPENSSH PRIVATE KEY-----"

    stored = field.get_prep_value(secret)

    assert "secret" not in stored
    assert stored != field.get_prep_value(secret)  # a fresh IV on every write
    assert field.from_db_value(stored, None, None) == secret


def test_keys_rotate_the_first_encrypts_all_decrypt(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEY = old
    stored_with_old = EncryptedTextField().get_prep_value("ssh key")

    settings.FIELD_ENCRYPTION_KEY = f"{new},{old}"
    field = EncryptedTextField()

    assert field.from_db_value(stored_with_old, None, None) == "ssh key"
    stored_with_new = field.get_prep_value("ssh key")
    assert _fernet_for(new).decrypt(stored_with_new.encode()) == b"ssh key"


def test_empty_and_null_values_stay_as_they_are():
    field = EncryptedTextField()

    assert field.get_prep_value(None) is None
    assert field.get_prep_value("") == ""
    assert field.from_db_value(None, None, None) is None
