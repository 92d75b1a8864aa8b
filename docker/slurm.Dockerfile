# A single-node Slurm cluster for docker-compose.yml: munge, MariaDB, slurmdbd, slurmctld and
# slurmd, and an sshd on port 2222 for the key-only service user `computeshare`, brought up
# by the same script as the test cluster (scripts/testcluster, which starts each daemon
# directly: no systemd in a container). The service user and the tenant accounts it acts as
# through sudo are made by scripts/cluster-setup, the script owners run; testcluster finds it
# beside itself. Not for production: it is the stack's stand-in for an owner's cluster.
# (docker-compose.yml gives it CAP_SYS_ADMIN, without AppArmor's mount denial, so that
# cluster-setup can remount /proc with hidepid, as the cluster's verification requires.)
# python3: the platform reads job folders on the login node with a small Python reader
# (hpc/job_folder.py), as an owner's login node has it.
FROM debian:12

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        slurm-wlm slurmdbd munge mariadb-server mariadb-client openssh-server openssh-client \
        openssh-sftp-server sudo procps iproute2 ca-certificates python3 \
    && rm -rf /var/lib/apt/lists/*

COPY scripts/testcluster /usr/local/bin/testcluster
COPY scripts/cluster-setup /usr/local/bin/cluster-setup
ENV TESTCLUSTER_LISTEN=0.0.0.0
EXPOSE 2222
# The connection file (host key line, the service user's private key path) is in the volume
# /var/lib/computeshare-testcluster: what an owner pastes when registering the cluster.
CMD ["bash", "-c", "testcluster up && exec sleep infinity"]
