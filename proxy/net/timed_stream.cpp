#include "net/timed_stream.hpp"

#ifndef _WIN32

namespace warmslot {

struct timed_stream::timer_state {
    explicit timer_state(timed_stream* s) : owner(s) {}
    timed_stream* owner;                                     // null once the stream is gone
    clock::time_point armed_for = clock::time_point::max();  // max: no wait pending
    unsigned generation = 0;  // of the wait that counts; earlier ones are ignored
};

timed_stream::timed_stream(const executor_type& ex)
    : socket_(ex), timer_(ex), state_(std::make_shared<timer_state>(this)) {}

timed_stream::timed_stream(tcp::socket socket)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      state_(std::make_shared<timer_state>(this)) {}

timed_stream::~timed_stream() {
    state_->owner = nullptr;
    timer_.cancel();
}

void timed_stream::close() noexcept {
    error_code ignored;
    socket_.close(ignored);
}

void timed_stream::expires_at(clock::time_point deadline) {
    deadline_ = deadline;
    if (deadline != clock::time_point::max() && pending_ > 0) watch();
}

void timed_stream::disarm() {
    deadline_ = clock::time_point::max();
    if (state_->armed_for == clock::time_point::max()) return;
    state_->armed_for = clock::time_point::max();
    ++state_->generation;  // the cancelled wait is ignored
    timer_.cancel();
}

void timed_stream::watch() {
    // A wait that ends at or before the deadline looks at it then.
    if (state_->armed_for <= deadline_) return;
    arm(deadline_);
}

void timed_stream::arm(clock::time_point at) {
    state_->armed_for = at;
    timer_.expires_at(at);  // a wait still pending ends as cancelled and is ignored
    const unsigned generation = ++state_->generation;
    timer_.async_wait([state = state_, generation](error_code) {
        if (generation != state->generation || !state->owner) return;
        state->armed_for = clock::time_point::max();
        state->owner->on_timer();
    });
}

void timed_stream::on_timer() {
    // Nothing pending: the next operation to start arms the timer again.
    if (deadline_ == clock::time_point::max() || pending_ == 0) return;
    if (clock::now() < deadline_) return arm(deadline_);
    timed_out_ = true;
    error_code ignored;
    socket_.cancel(ignored);
}

}  // namespace warmslot

#endif  // _WIN32
