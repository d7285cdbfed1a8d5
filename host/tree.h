/* tree.h — removing a folder tree that a sandbox's code may still be changing. */
#ifndef RLM_TREE_H
#define RLM_TREE_H

/* Removes entry name of folder dirfd (AT_FDCWD: a path) and, when it is a folder, everything
 * beneath it, never following a symbolic link: a link is removed as a link, wherever it was
 * swapped in. 0 (also when nothing was there), or -1 with errno. */
int tree_remove_at(int dirfd, const char *name);

#endif
