# JupyterHub configuration of the jhub-gpubooking demo.
#
# It doubles as the example of a real installation: everything marked "demo only" is what you
# change for a real cluster (authenticator, addresses, the simulated Kubernetes API); the rest is
# what a real hub needs to offer GPU booking. scripts/demo starts it through demo/launch.py,
# which sets the DEMO_* environment variables read here.
import os

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

here = os.path.dirname(os.path.abspath(__file__))
state_dir = os.path.abspath(os.environ.get("DEMO_STATE_DIR", os.path.join(here, "..", ".demo")))
public_port = int(os.environ.get("DEMO_PORT", "8000"))
# Internal ports derive from the public one so that two demos (or the tests) never collide,
# and configurable-http-proxy's API port never lands on the simulated cluster's 6443.
hub_port = int(os.environ.get("DEMO_HUB_PORT", public_port + 81))
proxy_api_port = int(os.environ.get("DEMO_PROXY_API_PORT", public_port + 1))
service_port = int(os.environ.get("DEMO_SERVICE_PORT", public_port + 2101))
service_token = os.environ["DEMO_SERVICE_TOKEN"]  # generated once by launch.py, kept in state_dir

# --- the Hub itself (demo only: addresses, state folder, dummy logins) ------------------------
c.JupyterHub.bind_url = f"http://127.0.0.1:{public_port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = hub_port
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = os.path.join(state_dir, "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{os.path.join(state_dir, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(state_dir, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(state_dir, "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # stopping the demo stops every server: no process left behind

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "demo"
c.Authenticator.allowed_users = {"alice", "bob"}
c.Authenticator.admin_users = {"admin"}
c.JupyterHub.load_groups = {"course": {"users": ["bob"]}}
c.JupyterHub.allow_named_servers = True

if os.environ.get("DEMO_ADMIN_TOKEN"):
    # lets scripts drive the Hub and the booking service as the admin user
    c.JupyterHub.api_tokens = {os.environ["DEMO_ADMIN_TOKEN"]: "admin"}

# --- GPU booking (what a real installation adds) -----------------------------------------------
# One call: the hub-managed booking service, its Hub API scopes merged into the role
# "gpu-booking-service", the page's access scope merged into the "user" role (its "self" kept),
# one API token shared by the service and the spawner, and GPUBookingSpawner as the spawner:
# a KubeSpawner that only gives GPUs to booked users.
import jhub_gpubooking

jhub_gpubooking.configure(
    c,
    url=f"http://127.0.0.1:{service_port}",
    config_file=os.path.join(here, "gpubooking_config.py"),
    api_token=service_token,
    # the service sees only JupyterHub's env_keep plus this: tell it where the demo's state is
    environment={"DEMO_STATE_DIR": state_dir},
)
# no pod deadline: the service stops a server at its booking's end (and follows extensions)
c.GPUBookingSpawner.pod_deadline_seconds = 0

# Demo only: the simulated cluster runs each pod as a local process, found through KUBECONFIG.
c.KubeSpawner.namespace = os.environ.get("DEMO_NAMESPACE", "jhub-demo")
c.KubeSpawner.image = "quay.io/jupyter/base-notebook:latest"  # recorded in the pod; not pulled here
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.hub_connect_url = f"http://127.0.0.1:{hub_port}"
c.KubeSpawner.start_timeout = 90
c.KubeSpawner.http_timeout = 60
c.KubeSpawner.default_url = "/lab"
c.KubeSpawner.cpu_guarantee = 0.5
c.KubeSpawner.mem_guarantee = "1G"

# An ordinary profile list: a GPU profile is one that names a pool.
c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "2 CPUs, 4 GB, no GPU. Always available.",
        "default": True,
        "kubespawner_override": {"cpu_limit": 2, "mem_limit": "4G"},
    },
    {
        "display_name": "A100 share (HAMi)",
        "slug": "a100",
        "description": "The A100 share you booked (a quarter, a half... or whole GPUs).",
        "gpu_pool": "a100",
        "kubespawner_override": {"cpu_limit": 8, "mem_limit": "32G"},
    },
    {
        "display_name": "Whole L4 GPUs",
        "slug": "l4",
        "description": "The L4 GPUs you booked.",
        "gpu_pool": "l4",
        "kubespawner_override": {"cpu_limit": 8, "mem_limit": "32G"},
    },
]
