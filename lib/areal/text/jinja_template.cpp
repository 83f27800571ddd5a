#include "areal/text/jinja_template.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>

#include "areal/text/jinja_builtins.h"

namespace areal::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;

// Walks the nodes with a stack of variable frames: the context (and top-level sets),
// then one per loop iteration and macro call. As in Jinja, a set inside a loop body
// is gone at the next iteration and after the loop (a namespace carries state out).
class Renderer {
 public:
  Renderer(const std::string& name, const ValueDict& context) : name_(name) {
    auto root = std::make_shared<Frame>();
    for (const auto& [key, value] : context) (*root)[key] = value;
    frames_.push_back(root);
  }

  enum class Flow { Normal, Break, Continue };

  Flow render(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& node : nodes)
      if (Flow flow = render_node(node, out); flow != Flow::Normal) return flow;
    return Flow::Normal;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw JinjaError(name_ + " line " + std::to_string(line) + ": " + what);
  }

  Flow render_node(const Node& node, std::string& out) {
    switch (node.kind) {
      case Node::Kind::Text: out += node.text; return Flow::Normal;
      case Node::Kind::Output: out += eval(*node.expr).str(); return Flow::Normal;
      case Node::Kind::If:
        for (size_t i = 0; i < node.branches.size(); ++i)
          if (i >= node.conditions.size() || eval(*node.conditions[i]).truthy()) return render(node.branches[i], out);
        return Flow::Normal;
      case Node::Kind::For: return render_for(node, out);
      case Node::Kind::Set: assign(node, eval(*node.expr)); return Flow::Normal;
      case Node::Kind::SetBlock: {
        std::string captured;
        render(node.body, captured);
        assign(node, Value(captured));
        return Flow::Normal;
      }
      case Node::Kind::Macro: (*frames_.back())[node.targets[0]] = macro(node); return Flow::Normal;
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::Generation: return render(node.body, out);
    }
    return Flow::Normal;
  }

  void assign(const Node& node, const Value& value) {
    if (node.targets.size() == 1) {
      (*frames_.back())[node.targets[0]] = value;
      return;
    }
    const Value ns = lookup(node.targets[0]);
    if (!ns.is_namespace())
      fail(node.line, "cannot set attribute '" + node.targets[1] + "' of '" + node.targets[0] +
                          "': only a namespace() takes attributes");
    if (Value* slot = ns.find(node.targets[1])) *slot = value;
    else ns.dict().emplace_back(node.targets[1], value);
  }

  Flow render_for(const Node& node, std::string& out) {
    ValueList items;
    try {
      const Value iterable = eval(*node.expr);
      if (iterable.is_none()) throw EvalError("'NoneType' object is not iterable");
      items = iterate(iterable);
    } catch (const EvalError& e) {
      fail(node.line, e.what());
    }
    if (node.filter) {  // `for x in xs if cond`: loop.* counts the kept items only
      ValueList kept;
      for (const Value& item : items) {
        frames_.push_back(std::make_shared<Frame>());
        bind_targets(node, item);
        const bool keep = eval(*node.filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(node.else_body, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      frames_.push_back(std::make_shared<Frame>());
      bind_targets(node, items[i]);
      ValueDict loop = {{"index", Value(i + 1)},
                        {"index0", Value(i)},
                        {"revindex", Value(n - i)},
                        {"revindex0", Value(n - i - 1)},
                        {"first", Value(i == 0)},
                        {"last", Value(i == n - 1)},
                        {"length", Value(n)},
                        {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
                        {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")}};
      loop.emplace_back("cycle", Value(Function([i](const Arguments& a) {
                          if (a.positional.empty()) throw EvalError("loop.cycle: no items to cycle through");
                          return a.positional[i % a.positional.size()];
                        })));
      (*frames_.back())["loop"] = Value(loop);
      const Flow flow = render(node.body, out);
      frames_.pop_back();
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void bind_targets(const Node& node, const Value& item) {
    if (node.targets.size() == 1) {
      (*frames_.back())[node.targets[0]] = item;
      return;
    }
    if (!item.is_list() || item.list().size() != node.targets.size())
      fail(node.line, "cannot unpack " + item.repr() + " into " + std::to_string(node.targets.size()) + " variables");
    for (size_t k = 0; k < node.targets.size(); ++k) (*frames_.back())[node.targets[k]] = item.list()[k];
  }

  // A macro: called, it renders its body in a frame of its own over the top level.
  Value macro(const Node& node) {
    return Value(Function([this, &node](const Arguments& args) {
      auto frame = std::make_shared<Frame>();
      if (args.positional.size() > node.params.size())
        throw EvalError("macro '" + node.targets[0] + "' takes " + std::to_string(node.params.size()) + " arguments");
      for (size_t k = 0; k < node.params.size(); ++k) {
        const auto& [param, fallback] = node.params[k];
        Value value = args.get(k, param, Value::undefined("'" + param + "' is undefined"));
        if (value.is_undefined() && fallback) value = eval(*fallback);
        (*frame)[param] = value;
      }
      for (const auto& [key, value] : args.keyword) {
        bool known = false;
        for (const auto& p : node.params) known = known || p.first == key;
        if (!known) throw EvalError("macro '" + node.targets[0] + "' has no parameter '" + key + "'");
      }
      std::vector<std::shared_ptr<Frame>> saved = {frames_[0], frame};
      std::swap(saved, frames_);
      std::string out;
      try {
        render(node.body, out);
      } catch (...) {
        std::swap(saved, frames_);
        throw;
      }
      std::swap(saved, frames_);
      return Value(out);
    }));
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
      if (auto found = (*it)->find(name); found != (*it)->end()) return found->second;
    if (Value fn = global_function(name); !fn.is_undefined()) return fn;
    return Value::undefined("'" + name + "' is undefined");
  }

  // Evaluates `e`; an EvalError from a builtin becomes a JinjaError with e's line.
  Value eval(const Expr& e) {
    try {
      return evaluate(e);
    } catch (const EvalError& error) {
      fail(e.line, error.what());
    }
  }

  Arguments arguments(const Expr& e, size_t first) {
    Arguments args;
    for (size_t k = first; k < e.children.size(); ++k) args.positional.push_back(evaluate(*e.children[k]));
    for (const auto& [key, value] : e.keyword) args.keyword.emplace_back(key, evaluate(*value));
    return args;
  }

  Value evaluate(const Expr& e) {
    const auto& c = e.children;
    switch (e.kind) {
      case Expr::Kind::Literal: return e.literal;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::List: {
        ValueList items;
        for (const auto& child : c) items.push_back(evaluate(*child));
        return Value(items);
      }
      case Expr::Kind::Dict: {
        ValueDict items;
        for (size_t k = 0; k + 1 < c.size(); k += 2) {
          const Value key = evaluate(*c[k]);
          if (!key.is_string()) throw EvalError("a dict key must be a string here, not " + key.type_name());
          items.emplace_back(key.as_string(), evaluate(*c[k + 1]));
        }
        return Value(items);
      }
      case Expr::Kind::Attribute: return get_attribute(evaluate(*c[0]), e.name);
      case Expr::Kind::Item: return get_item(evaluate(*c[0]), evaluate(*c[1]));
      case Expr::Kind::Slice: return slice(evaluate(*c[0]), c[1], c[2], c[3]);
      case Expr::Kind::Call: {
        const Value callee = evaluate(*c[0]);
        if (callee.is_undefined()) throw EvalError(callee.undefined_reason() + " (called as a function)");
        if (callee.type() != Value::Type::Function) throw EvalError("'" + callee.type_name() + "' object is not callable");
        return callee.function()(arguments(e, 1));
      }
      case Expr::Kind::Filter: return apply_filter(e.name, evaluate(*c[0]), arguments(e, 1));
      case Expr::Kind::Test: {
        // `x is defined` must not fail on an undefined x's attribute chain.
        const Value subject = evaluate(*c[0]);
        return Value(apply_test(e.name, subject, arguments(e, 1)) != e.negated);
      }
      case Expr::Kind::Unary: {
        const Value v = evaluate(*c[0]);
        if (!v.is_number()) throw EvalError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v;
        return v.type() == Value::Type::Float ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case Expr::Kind::Binary: return binary_operator(e.name, evaluate(*c[0]), evaluate(*c[1]));
      case Expr::Kind::And: {
        Value a = evaluate(*c[0]);
        return a.truthy() ? evaluate(*c[1]) : a;
      }
      case Expr::Kind::Or: {
        Value a = evaluate(*c[0]);
        return a.truthy() ? a : evaluate(*c[1]);
      }
      case Expr::Kind::Not: return Value(!evaluate(*c[0]).truthy());
      case Expr::Kind::Conditional:
        if (evaluate(*c[1]).truthy()) return evaluate(*c[0]);
        return c[2] ? evaluate(*c[2]) : Value::undefined("the conditional expression had no else branch");
    }
    return Value();
  }

  // Python's sequence[start:stop:step] on a list or a string (by code point).
  Value slice(const Value& v, const ExprPtr& start_e, const ExprPtr& stop_e, const ExprPtr& step_e) {
    if (!v.is_list() && !v.is_string()) {
      if (v.is_undefined()) throw EvalError(v.undefined_reason());
      throw EvalError("'" + v.type_name() + "' object is not subscriptable");
    }
    const std::u32string chars = v.is_string() ? utf8_to_utf32(v.as_string()) : std::u32string();
    const int64_t n = v.is_string() ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(v.list().size());
    auto bound = [&](const ExprPtr& e) -> std::optional<int64_t> {
      if (!e) return std::nullopt;
      const Value x = evaluate(*e);
      if (x.is_none()) return std::nullopt;
      if (!x.is_number() || x.type() == Value::Type::Float) throw EvalError("slice indices must be integers");
      return x.as_int();
    };
    const int64_t step = bound(step_e).value_or(1);
    if (step == 0) throw EvalError("slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> i, int64_t fallback) {
      if (!i) return fallback;
      int64_t x = *i < 0 ? *i + n : *i;
      return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(bound(start_e), step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bound(stop_e), step > 0 ? n : -1);
    std::vector<int64_t> picked;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
    if (v.is_string()) {
      std::u32string out;
      for (int64_t i : picked) out.push_back(chars[i]);
      return Value(utf32_to_utf8(out));
    }
    ValueList out;
    for (int64_t i : picked) out.push_back(v.list()[i]);
    return Value(out);
  }

  std::string name_;
  std::vector<std::shared_ptr<Frame>> frames_;
};

}  // namespace

Template::Template(const std::string& source, const std::string& name)
    : name_(name), nodes_(parse_template(source, name)) {}

std::string Template::render(const ValueDict& context) const {
  Renderer renderer(name_, context);
  std::string out;
  if (renderer.render(nodes_, out) != Renderer::Flow::Normal)
    throw JinjaError(name_ + ": break or continue outside a loop");
  return out;
}

}  // namespace areal::jinja
