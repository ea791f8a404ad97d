/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Helper of tests/apps/exec-inherit.py (suite preload): run under smcrun with an SMC
 * socket inherited at descriptor FD, exec "PYTHON SCRIPT serve FD" through the exec
 * function VARIANT, so that each wrapper of libsmcrun.so hands the socket on.
 * Usage: exec-variants VARIANT FD PYTHON SCRIPT. Exit status 2 on bad usage, 3 if
 * the exec failed. */

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);

int main(int argc, char **argv) {
        char *args[5], *dir, *base, path[4096];
        const char *v;

        if (argc != 5)
                return 2;
        v = argv[1];
        args[0] = argv[3];
        args[1] = argv[4];
        args[2] = (char *) "serve";
        args[3] = argv[2];
        args[4] = NULL;
        /* the p-variants find python by its name in PATH */
        snprintf(path, sizeof(path), "%s", argv[3]);
        dir = dirname(path);
        if (setenv("PATH", dir, 1) < 0)
                return 2;
        snprintf(path, sizeof(path), "%s", argv[3]);
        base = basename(path);
        if (!strcmp(v, "execl"))
                execl(argv[3], argv[3], argv[4], "serve", argv[2], (char *) NULL);
        else if (!strcmp(v, "execlp"))
                execlp(base, argv[3], argv[4], "serve", argv[2], (char *) NULL);
        else if (!strcmp(v, "execle"))
                execle(argv[3], argv[3], argv[4], "serve", argv[2], (char *) NULL, environ);
        else if (!strcmp(v, "execv"))
                execv(argv[3], args);
        else if (!strcmp(v, "execvp"))
                execvp(base, args);
        else if (!strcmp(v, "execvpe"))
                execvpe(base, args, environ);
        else if (!strcmp(v, "fexecve")) {
                int fd = open(argv[3], O_RDONLY | O_CLOEXEC);

                if (fd >= 0)
                        fexecve(fd, args, environ);
        } else if (!strcmp(v, "execveat"))
                execveat(AT_FDCWD, argv[3], args, environ, 0);
        else if (!strcmp(v, "posix_spawnp")) {
                pid_t pid;
                int st;

                if (posix_spawnp(&pid, base, NULL, NULL, args, environ) != 0)
                        return 3;
                close(atoi(argv[2])); /* ends nothing: the child holds it */
                if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
                        return 3;
                return WEXITSTATUS(st);
        } else if (!strcmp(v, "system") || !strcmp(v, "popen")) {
                /* the shell glibc starts hands the socket on to python (exec) */
                char cmd[8192];
                FILE *f;
                int st;

                snprintf(cmd, sizeof(cmd), "exec '%s' '%s' serve %s", argv[3], argv[4], argv[2]);
                if (!strcmp(v, "system"))
                        st = system(cmd);
                else {
                        f = popen(cmd, "r");
                        if (!f)
                                return 3;
                        while (fgetc(f) != EOF)
                                ;
                        st = pclose(f);
                }
                close(atoi(argv[2])); /* ends nothing until the child's copy is gone */
                if (st == -1 || !WIFEXITED(st))
                        return 3;
                return WEXITSTATUS(st);
        } else
                return 2;
        fprintf(stderr, "exec-variants: %s: %s\n", v, strerror(errno));
        return 3;
}
