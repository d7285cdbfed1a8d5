#ifndef RLM_INIT_H
#define RLM_INIT_H

/* As PID 1, forks: the parent becomes a minimal init (forwards signals, reaps every child, exits
 * with the child's status) and never returns; the child returns and runs rlm. Otherwise does
 * nothing. */
void init_if_pid1(void);

#endif
