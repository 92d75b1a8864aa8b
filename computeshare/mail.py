"""Mail as files, for the demo: one file per message in EMAIL_FILE_PATH.

Django's file backend names a connection's file by the second it opened and the connection
object's id, and every `send_mail` opens a connection: two messages sent in one second could get
the same name (a freed object's id is given again) and land in one file. Here each file's name
also carries a random part."""

import datetime
import os
import uuid

from django.core.mail.backends.filebased import EmailBackend


class OneFilePerMessageBackend(EmailBackend):
    _fname: str | None

    def _get_filename(self) -> str:
        if self._fname is None:
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            self._fname = os.path.join(self.file_path, f"{stamp}-{uuid.uuid4().hex}.log")
        return self._fname
