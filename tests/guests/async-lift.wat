;; A component with one async lift and no wasi:http export: what uses the
;; component model's async ABI without being a p3 component. Read by the
;; detection's unit test (runtime/src/servlet/component/p3.rs) and by
;; tests/e2e/components_p3.rs.
(component
  (core module $m
    (import "" "task.return" (func (param i32)))
    (func (export "f") (result i32) i32.const 0)
    (func (export "cb") (param i32 i32 i32) (result i32) i32.const 0))
  (core func $ret (canon task.return (result u32)))
  (core instance $i (instantiate $m (with "" (instance (export "task.return" (func $ret))))))
  (type $f (func async (result u32)))
  (func (export "f") (type $f)
    (canon lift (core func $i "f") async (callback (core func $i "cb")))))
