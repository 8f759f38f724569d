// The workers: single-threaded io_contexts, one thread each, and the compute pool. See
// server.hpp.
#include "http/server.hpp"

namespace warmslot::http_server {

class workers::own_context : public net::io_context {
  public:
    using net::execution_context::shutdown;  // protected in execution_context
    using net::io_context::io_context;
};

workers::workers(std::size_t n) : compute_((n + 1) / 2) {
    for (std::size_t i = 0; i < n; ++i) {
        contexts_.push_back(std::make_unique<own_context>(1));
        guards_.push_back(
            std::make_unique<net::executor_work_guard<net::io_context::executor_type>>(
                contexts_.back()->get_executor()));
    }
}

workers::~workers() {
    stop();
    join();
}

void workers::start() {
    for (auto& c : contexts_) threads_.emplace_back([ctx = c.get()] { ctx->run(); });
}

void workers::stop() {
    for (auto& c : contexts_) c->stop();
}

net::io_context& workers::context(std::size_t i) { return *contexts_[i]; }

void workers::shutdown() {
    // The guards first: an io_context on Windows (IOCP) waits in its shutdown until no work is
    // outstanding, and a guard is outstanding work.
    guards_.clear();
    for (auto& c : contexts_) c->shutdown();
}

void workers::join() {
    for (auto& t : threads_) {
        if (t.joinable()) t.join();
    }
    threads_.clear();
    // Not stopped: its queued jobs run, and the coroutines they resume wait in the stopped
    // io_contexts, destroyed by shutdown with the rest.
    compute_.join();
}

}  // namespace warmslot::http_server
