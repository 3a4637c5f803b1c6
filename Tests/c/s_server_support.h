/* `openssl s_server` as the peer of the token tests (which define _DEFAULT_SOURCE first). */
#ifndef MTLS_S_SERVER_SUPPORT_H
#define MTLS_S_SERVER_SUPPORT_H
#include "test_support.h"
#include <unistd.h>

/* Starts `openssl s_server` requiring a client certificate from the test CA; returns its pid
 * and the port it listens on. */
static inline pid_t start_server(const char *dir, const char *tls_flag, int *port) {
    char cmd[4096], portfile[600];
    snprintf(portfile, sizeof portfile, "%s/sserver.out", dir);
    unlink(portfile); /* the previous server's port must not be read */
    snprintf(cmd, sizeof cmd,
             "exec openssl s_server -accept 127.0.0.1:0 -naccept 1 %s -cert %s/server.pem -key %s/server.key "
             "-CAfile %s/ca.pem -Verify 1 -verify_return_error > %s 2>&1",
             tls_flag, dir, dir, dir, portfile);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        /* stdin stays open (s_server quits at its end) until the test kills the server. */
        dup2(fds[0], 0);
        close(fds[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(portfile, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            char *colon = strrchr(line, ':');
            if (strncmp(line, "ACCEPT ", 7) == 0 && colon) { *port = atoi(colon + 1); fclose(f); return pid; }
        }
        if (f) fclose(f);
        usleep(50 * 1000);
    }
    fprintf(stderr, "s_server did not start\n");
    exit(1);
}

#endif
