package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/axon-kv/axon/core"
	"github.com/axon-kv/axon/core/auth"
)

// authServer is etcd's Auth service. Changes and the reads etcd makes
// linearizable run on the leader (followers forward them with the
// caller's token); Authenticate and AuthStatus on any instance, against
// the store in the engine.
type authServer struct {
	pb.UnimplementedAuthServer
	s *Server
}

// onLeader runs a call of the Auth service on the leader, checked by
// check against the leader's store, and answers with a header at the
// commit point.
func onLeader[T interface{ GetHeader() *pb.ResponseHeader }](s *Server, ctx context.Context, check authCheck,
	local func(st *auth.Store, id auth.Identity, h *pb.ResponseHeader) (T, error),
	remote func(context.Context, pb.AuthClient) (T, error)) (T, error) {
	return forward(s, ctx, func() (T, error) {
		var zero T
		if !s.drv.Leading() {
			return zero, core.ErrNotLeader
		}
		st, err := s.authView(ctx, nil, true)
		if err != nil {
			return zero, err
		}
		var id auth.Identity
		if st.Enabled {
			if id, err = s.identify(ctx, st); err != nil {
				return zero, err
			}
			if err := check(st, id); err != nil {
				return zero, err
			}
		}
		return local(st, id, s.header(s.committed()))
	}, func(ctx context.Context, cc *grpc.ClientConn) (T, error) { return remote(ctx, pb.NewAuthClient(cc)) })
}

// change runs a change of the auth store on the leader (changeAuth
// checks the caller).
func change[T interface{ GetHeader() *pb.ResponseHeader }](s *Server, ctx context.Context, ch auth.Change, resp func(*pb.ResponseHeader) T,
	remote func(context.Context, pb.AuthClient) (T, error)) (T, error) {
	return onLeader(s, ctx, tokenValid, func(_ *auth.Store, _ auth.Identity, _ *pb.ResponseHeader) (T, error) {
		if err := s.changeAuth(ctx, ch); err != nil {
			var zero T
			return zero, err
		}
		return resp(s.header(s.committed())), nil
	}, remote)
}

func (a authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthEnableResponse { return &pb.AuthEnableResponse{Header: h} },
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthEnableResponse, error) {
			return c.AuthEnable(ctx, r)
		})
}

func (a authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthDisableResponse { return &pb.AuthDisableResponse{Header: h} },
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthDisableResponse, error) {
			return c.AuthDisable(ctx, r)
		})
}

func (a authServer) AuthStatus(ctx context.Context, _ *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	st, err := a.s.authView(ctx, nil, false)
	if err == nil && st.Enabled {
		_, err = a.s.identify(ctx, st)
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := st.Status()
	resp.Header = a.s.header(a.s.committed())
	return resp, nil
}

func (a authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	tok, err := a.s.authenticate(ctx, r.Name, r.Password)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.AuthenticateResponse{Header: a.s.header(a.s.committed()), Token: tok}, nil
}

// withHash returns a copy of a request whose password is replaced by its
// bcrypt hash (the request itself may still be forwarded as it is).
func (s *Server) withHash(r interface {
	proto.Message
	GetPassword() string
}, noPassword bool) (auth.Change, error) {
	c := proto.Clone(r)
	if noPassword {
		return c, nil
	}
	h, err := s.hashPassword(r.GetPassword())
	if err != nil {
		// As etcd: bcrypt's own error (a password over 72 bytes), Unknown.
		return nil, status.Error(codes.Unknown, err.Error())
	}
	switch c := c.(type) {
	case *pb.AuthUserAddRequest:
		c.Password, c.HashedPassword = "", h
	case *pb.AuthUserChangePasswordRequest:
		c.Password, c.HashedPassword = "", h
	}
	return c, nil
}

func (a authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return onLeader(a.s, ctx, tokenValid, func(*auth.Store, auth.Identity, *pb.ResponseHeader) (*pb.AuthUserAddResponse, error) {
		ch, err := a.s.withHash(r, r.Options.GetNoPassword())
		if err == nil {
			err = a.s.changeAuth(ctx, ch)
		}
		if err != nil {
			return nil, err
		}
		return &pb.AuthUserAddResponse{Header: a.s.header(a.s.committed())}, nil
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserAddResponse, error) { return c.UserAdd(ctx, r) })
}

func (a authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return onLeader(a.s, ctx, tokenValid, func(st *auth.Store, _ auth.Identity, _ *pb.ResponseHeader) (*pb.AuthUserChangePasswordResponse, error) {
		u := st.Users[r.Name]
		ch, err := a.s.withHash(r, u != nil && u.Options.GetNoPassword())
		if err == nil {
			err = a.s.changeAuth(ctx, ch)
		}
		if err != nil {
			return nil, err
		}
		return &pb.AuthUserChangePasswordResponse{Header: a.s.header(a.s.committed())}, nil
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserChangePasswordResponse, error) {
		return c.UserChangePassword(ctx, r)
	})
}

func (a authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthUserDeleteResponse { return &pb.AuthUserDeleteResponse{Header: h} },
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserDeleteResponse, error) {
			return c.UserDelete(ctx, r)
		})
}

func (a authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthUserGrantRoleResponse {
		return &pb.AuthUserGrantRoleResponse{Header: h}
	},
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserGrantRoleResponse, error) {
			return c.UserGrantRole(ctx, r)
		})
}

func (a authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthUserRevokeRoleResponse {
		return &pb.AuthUserRevokeRoleResponse{Header: h}
	},
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserRevokeRoleResponse, error) {
			return c.UserRevokeRole(ctx, r)
		})
}

func (a authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthRoleAddResponse { return &pb.AuthRoleAddResponse{Header: h} },
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthRoleAddResponse, error) { return c.RoleAdd(ctx, r) })
}

func (a authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthRoleDeleteResponse { return &pb.AuthRoleDeleteResponse{Header: h} },
		func(ctx context.Context, c pb.AuthClient) (*pb.AuthRoleDeleteResponse, error) {
			return c.RoleDelete(ctx, r)
		})
}

func (a authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthRoleGrantPermissionResponse {
		return &pb.AuthRoleGrantPermissionResponse{Header: h}
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthRoleGrantPermissionResponse, error) {
		return c.RoleGrantPermission(ctx, r)
	})
}

func (a authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return change(a.s, ctx, r, func(h *pb.ResponseHeader) *pb.AuthRoleRevokePermissionResponse {
		return &pb.AuthRoleRevokePermissionResponse{Header: h}
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthRoleRevokePermissionResponse, error) {
		return c.RoleRevokePermission(ctx, r)
	})
}

func (a authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	// etcd lets a user read itself.
	self := func(st *auth.Store, id auth.Identity) error {
		if err := st.CheckAdmin(id); err != nil && r.Name != id.User {
			return err
		}
		return nil
	}
	return onLeader(a.s, ctx, self, func(st *auth.Store, _ auth.Identity, h *pb.ResponseHeader) (*pb.AuthUserGetResponse, error) {
		resp, err := st.UserGet(r.Name)
		if err != nil {
			return nil, err
		}
		resp.Header = h
		return resp, nil
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserGetResponse, error) { return c.UserGet(ctx, r) })
}

func (a authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	// etcd lets a user read its own roles.
	own := func(st *auth.Store, id auth.Identity) error {
		if err := st.CheckAdmin(id); err != nil && !st.HasRole(id.User, r.Role) {
			return err
		}
		return nil
	}
	return onLeader(a.s, ctx, own, func(st *auth.Store, _ auth.Identity, h *pb.ResponseHeader) (*pb.AuthRoleGetResponse, error) {
		resp, err := st.RoleGet(r.Role)
		if err != nil {
			return nil, err
		}
		resp.Header = h
		return resp, nil
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthRoleGetResponse, error) { return c.RoleGet(ctx, r) })
}

func (a authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return onLeader(a.s, ctx, admin, func(st *auth.Store, _ auth.Identity, h *pb.ResponseHeader) (*pb.AuthUserListResponse, error) {
		resp := st.UserList()
		resp.Header = h
		return resp, nil
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthUserListResponse, error) {
		return c.UserList(ctx, r)
	})
}

func (a authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return onLeader(a.s, ctx, admin, func(st *auth.Store, _ auth.Identity, h *pb.ResponseHeader) (*pb.AuthRoleListResponse, error) {
		resp := st.RoleList()
		resp.Header = h
		return resp, nil
	}, func(ctx context.Context, c pb.AuthClient) (*pb.AuthRoleListResponse, error) {
		return c.RoleList(ctx, r)
	})
}
