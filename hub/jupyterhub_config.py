"""JupyterHub 6 for the course, on one machine: `python -m hub` writes the settings this file
reads (DDP_HUB_SETTINGS, a JSON file) and starts `jupyterhub -f hub/jupyterhub_config.py`.

* Users are the machine's own (PAM): the instructor and the students, each a Unix user.
* Each user's server is the course's venv (`jupyterhub-singleuser`), run as that user,
  opening JupyterLab in their home.
* nbgrader's settings come from this folder, by role (JUPYTER_CONFIG_PATH): common/ for
  everyone (the course id, the exchange), instructor/ (the course directory), student/
  (formgrader, the course list and assignment creation turned off: a student sees the
  Assignments list and Validate only).
"""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the course's hub/ package: run by jupyterhub, not imported
from hub.users import account, environment  # noqa: E402

settings = json.loads(Path(os.environ["DDP_HUB_SETTINGS"]).read_text())
state = Path(settings["state"])

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.JupyterHub.bind_url = f"http://{settings['ip']}:{settings['port']}"
# The hub's own API and the proxy's, on the two ports above it: two hubs on one machine do not meet.
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{settings['port'] + 1}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['port'] + 2}"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
c.ConfigurableHTTPProxy.command = [settings["proxy"]]
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
c.JupyterHub.cleanup_servers = True  # Ctrl-C stops every user's server with the hub
c.JupyterHub.cleanup_proxy = True

c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {settings["instructor"], *settings["students"]}
c.Authenticator.admin_users = {settings["instructor"]}

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(Path(settings["venv_bin"]) / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def _role_environment(spawner) -> None:
    spawner.environment.update(environment(account(spawner.user.name), settings))


c.Spawner.pre_spawn_hook = _role_environment
