# EXAMPLE, NOT TESTED HERE: no Nomad cluster runs in turnhost's CI, and nothing validates this
# file. Read docs/hosting.md ("The fleet") before using it.
#
# One turnhost per client node, as a system job: the raw_exec driver runs the packaged unit's
# command on the node, where the turnhost package is installed (the cloud-init template without
# its last step, or your image). raw_exec runs as root with no isolation of its own, which is
# what the supervisor needs (a delegated cgroup subtree, the setuid identity helper, namespaces);
# enable it only on the nodes that host turns (plugin "raw_exec" { config { enabled = true } }).
# Simpler, and what this repository tests: let systemd run the packaged unit (the cloud-init
# template) and use Nomad only to place host applications.
job "turnhost" {
  type        = "system"
  datacenters = ["dc1"]

  constraint {
    attribute = "${meta.turnhost_host}"
    value     = "true"
  }

  group "turnhost" {
    network {
      port "api" {
        static = 7707
      }
    }

    task "supervisor" {
      # As root: raw_exec gives the task a cgroup only root may write, and the supervisor makes
      # a leaf per turn below its own. A root supervisor still runs each turn as a separate uid
      # through the identity helper (separate_uid); docs/operator.md says what root changes.
      driver = "raw_exec"

      config {
        command = "/usr/bin/turnhost"
        args    = ["serve", "--config", "/etc/turnhost/turnhost.json"]
      }

      # SIGTERM ends the supervisor and its running turns. Before an update or a node drain,
      # `nomad alloc signal -s SIGUSR2 <alloc>` puts the host in drain mode (new turns refused,
      # GET /api/ready 503 so the host application places elsewhere); stop it once
      # `turnhost status` shows no turn running.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      service {
        name     = "turnhost"
        port     = "api"
        provider = "nomad"

        check {
          type     = "http"
          path     = "/api/ready"
          interval = "10s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 2000
        memory = 4096
      }
    }
  }
}
