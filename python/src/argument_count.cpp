// Calls with the wrong number of arguments, or an unknown keyword: pybind11 answers them with its own TypeError,
// which lists every overload's C++ signature and then the repr of every argument received (a whole array or
// .ptd). Each public method of the module's classes gets a last overload that takes any arguments and raises the
// package's short InvalidTypeError instead. It comes after the real overload, so a call that matches costs
// nothing more.

#include <Python.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "binding.h"

namespace etnp::python {

namespace {

// "name(self: pkg.Method, inputs: object = (), clone_outputs: bool = True) -> object\n\n..." ->
// "inputs=(), clone_outputs=True". Top-level commas only: an annotation may hold "dict[str, object]".
std::string parameters_of(const std::string& doc) {
  const size_t open = doc.find('(');
  if (open == std::string::npos) return "...";
  std::vector<std::string> params;
  std::string current;
  int depth = 0;
  size_t i = open + 1;
  for (; i < doc.size(); ++i) {
    const char c = doc[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth-- == 0) break;
    if (c == ',' && depth == 0) {
      params.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  if (!current.empty()) params.push_back(current);
  std::string shown;
  for (std::string p : params) {
    while (!p.empty() && p.front() == ' ') p.erase(0, 1);
    const size_t colon = p.find(':');
    const size_t equals = p.find(" = ");
    std::string name = p.substr(0, colon == std::string::npos ? p.find(' ') : colon);
    if (name == "self" || name.empty()) continue;
    if (equals != std::string::npos) name += "=" + p.substr(equals + 3);
    shown += (shown.empty() ? "" : ", ") + name;
  }
  return shown;
}

}  // namespace

std::string received_arguments(std::span<PyObject* const> positional, std::span<PyObject* const> keyword_names) {
  std::string types;
  for (PyObject* arg : positional) types += (types.size() ? ", " : "") + type_name(arg);
  std::string text = positional.empty() ? "no positional argument"
                                        : std::to_string(positional.size()) + " positional argument" +
                                              (positional.size() == 1 ? "" : "s") + " (" + types + ")";
  if (!keyword_names.empty()) {
    std::string names;
    for (PyObject* name : keyword_names) {
      names += (names.empty() ? "'" : ", '") + printable(py::str(name).cast<std::string>(), 40) + "'";
    }
    text += " and keyword argument" + std::string(keyword_names.size() == 1 ? " " : "s ") + names;
  }
  return text;
}

namespace {

// Whether the overload's parameters are all taken as Python objects (or str). With a typed parameter (a bool, a
// float), pybind11 tries every overload once without implicit conversions first, and the catch-all would win
// over a call that needs one; such methods keep pybind11's own message.
bool takes_objects_only(const std::string& doc) {
  const size_t open = doc.find('('), close = doc.find(") ->");
  if (open == std::string::npos || close == std::string::npos) return false;
  const std::string params = doc.substr(open + 1, close - open - 1);
  for (size_t colon = params.find(": "); colon != std::string::npos; colon = params.find(": ", colon + 1)) {
    const size_t end = params.find_first_of(",=", colon);
    std::string type = params.substr(colon + 2, (end == std::string::npos ? params.size() : end) - colon - 2);
    while (!type.empty() && type.back() == ' ') type.pop_back();
    const bool first = params.rfind(',', colon) == std::string::npos;  // self: the class itself
    if (!first && type != "object" && type != "handle" && type != "str" && type != "typing.Any" && type != "Any") return false;
  }
  return true;
}

}  // namespace

void add_argument_count_checks(py::module_& m) {
  const std::string module_name = py::str(m.attr("__name__"));
  for (auto entry : py::reinterpret_borrow<py::dict>(m.attr("__dict__"))) {
    py::handle cls = entry.second;
    if (!PyType_Check(cls.ptr()) || !py::hasattr(cls, "__module__") ||
        py::str(cls.attr("__module__")).cast<std::string>() != module_name) {
      continue;
    }
    const std::string class_name = py::str(entry.first);
    py::dict members = py::reinterpret_borrow<py::dict>(py::handle(reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_dict));
    std::vector<std::pair<std::string, py::object>> methods;
    for (auto member : members) {
      const std::string name = py::str(member.first);
      if ((name.rfind('_', 0) == 0 && name != "__call__") || !PyInstanceMethod_Check(member.second.ptr())) continue;
      methods.emplace_back(name, py::reinterpret_borrow<py::object>(member.second));
    }
    for (auto& [name, method] : methods) {
      PyObject* function = PyInstanceMethod_GET_FUNCTION(method.ptr());
      if (!PyCFunction_Check(function)) continue;
      const char* original_doc = reinterpret_cast<PyCFunctionObject*>(function)->m_ml->ml_doc;
      const std::string doc = original_doc ? original_doc : "";
      if (doc.rfind(name + "(", 0) != 0 || doc.find("Overloaded function") != std::string::npos ||
          !takes_objects_only(doc)) {
        continue;
      }
      const std::string call = class_name + "." + name + "(" + parameters_of(doc) + ")";
      py::cpp_function catch_all(
          [call](py::args args, py::kwargs kwargs) -> py::object {
            std::vector<PyObject*> positional, names;
            for (size_t i = 1; i < args.size(); ++i) positional.push_back(args[i].ptr());  // args[0] is self
            for (auto item : kwargs) names.push_back(item.first.ptr());
            throw BindingError("InvalidType", call + " was called with " + received_arguments(positional, names));
          },
          py::name(name.c_str()), py::is_method(cls), py::sibling(method));
      // pybind11 rewrote the shared docstring to list both overloads; help() keeps showing the real one.
      PyMethodDef* def = reinterpret_cast<PyCFunctionObject*>(PyInstanceMethod_GET_FUNCTION(catch_all.ptr()))->m_ml;
      std::free(const_cast<char*>(def->ml_doc));
      def->ml_doc = strdup(doc.c_str());
      py::setattr(cls, name.c_str(), catch_all);
    }
  }
}

}  // namespace etnp::python
