// The embedding workspace's own runtime/task.h; unrelated to ferry's.
#ifndef EMBEDDING_RUNTIME_TASK_H_
#define EMBEDDING_RUNTIME_TASK_H_

namespace embedding {

struct Task {
  int id;
};

inline int TaskId(const Task& task) { return task.id; }

}  // namespace embedding

#endif  // EMBEDDING_RUNTIME_TASK_H_
